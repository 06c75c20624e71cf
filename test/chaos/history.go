package chaos

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Op is one line of the history: a client operation with its result, or a nemesis
// event (Kind "fault" / "heal").
type Op struct {
	I       int       `json:"i"`
	T       time.Time `json:"t"`              // when it started
	End     time.Time `json:"end"`            // when its result came back
	Worker  string    `json:"w"`              // client or "nemesis"
	Node    string    `json:"node,omitempty"` // the node the client is connected to
	Kind    string    `json:"op"`
	ID      string    `json:"id,omitempty"` // MessageId
	Session string    `json:"session,omitempty"`
	N       int       `json:"n,omitempty"`     // number of a session message within its session
	Seq     int64     `json:"seq,omitempty"`   // broker sequence number
	DC      uint32    `json:"dc,omitempty"`    // delivery count
	Epoch   int       `json:"epoch,omitempty"` // a session receiver's accept, or a receiver link
	Left    int       `json:"left,omitempty"`  // credit the previous receive of the epoch left on the link
	Ref     int       `json:"ref,omitempty"`   // the delivery a settlement refers to
	At      time.Time `json:"at,omitempty"`    // scheduled enqueue time
	DLQ     bool      `json:"dlq,omitempty"`
	Value   string    `json:"value,omitempty"`
	Fault   string    `json:"fault,omitempty"` // the faults active when it started
	Err     string    `json:"err,omitempty"`
}

// OK reports whether the operation succeeded.
func (o *Op) OK() bool { return o.Err == "" }

// History is the append-only list of operations, shared by every client.
type History struct {
	mu    sync.Mutex
	ops   []Op   // owner: mu
	fault string // the faults active now; owner: mu
}

// Add records op (stamping its index and the active faults unless set) and returns its
// index.
func (h *History) Add(op Op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.I = len(h.ops)
	if op.Fault == "" {
		op.Fault = h.fault
	}
	if op.End.IsZero() {
		op.End = time.Now()
	}
	h.ops = append(h.ops, op)
	return op.I
}

// SetFault names the faults active from now on ("" for none).
func (h *History) SetFault(f string) {
	h.mu.Lock()
	h.fault = f
	h.mu.Unlock()
}

// Fault is the faults active now.
func (h *History) Fault() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fault
}

// Ops returns a copy of the history.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// WriteFile writes the history as JSON lines.
func (h *History) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range h.Ops() {
		enc.Encode(op)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
