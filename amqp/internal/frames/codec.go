package frames

import (
	"fmt"

	"github.com/quorumbus/quorumbus/amqp/internal/encoding"
)

// reader walks the fields of a performative list, recording the first error.
type reader struct {
	f   encoding.Fields
	err error
}

func newReader(val []byte) (reader, error) {
	f, err := encoding.ListFields(val)
	if err != nil {
		return reader{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return reader{f: f}, nil
}

func (r *reader) setErr(err error) {
	if err != nil && r.err == nil {
		r.err = err
	}
}

func (r *reader) next() []byte {
	if r.err != nil {
		return nil
	}
	raw, err := r.f.Next()
	r.setErr(err)
	return raw
}

func (r *reader) skip(n int) {
	for range n {
		r.next()
	}
}

func (r *reader) optUint32() (uint32, bool) {
	raw := r.next()
	if encoding.IsNull(raw) {
		return 0, false
	}
	v, err := encoding.ReadUint(raw)
	r.setErr(err)
	return v, err == nil
}

func (r *reader) uint32(mandatory bool) uint32 {
	v, ok := r.optUint32()
	if !ok && mandatory && r.err == nil {
		r.err = fmt.Errorf("mandatory field missing")
	}
	return v
}

func (r *reader) bool() bool {
	raw := r.next()
	if encoding.IsNull(raw) {
		return false
	}
	v, err := encoding.ReadBool(raw)
	r.setErr(err)
	return v
}

func (r *reader) string() string {
	raw := r.next()
	if encoding.IsNull(raw) {
		return ""
	}
	s, err := encoding.ReadString(raw)
	r.setErr(err)
	return s
}

func (r *reader) binary() []byte {
	raw := r.next()
	if encoding.IsNull(raw) {
		return nil
	}
	p, err := encoding.ReadBytes(raw)
	r.setErr(err)
	return p
}

func (r *reader) value() any {
	raw := r.next()
	if encoding.IsNull(raw) {
		return nil
	}
	v, _, err := encoding.Decode(raw)
	r.setErr(err)
	return v
}

func (r *reader) mapField() encoding.Map {
	v := r.value()
	if v == nil {
		return nil
	}
	m, ok := v.(encoding.Map)
	if !ok {
		r.setErr(fmt.Errorf("expected map, got %T", v))
	}
	return m
}

// symbols reads a "multiple" symbol field: a single symbol or an array.
func (r *reader) symbols() []encoding.Symbol {
	v := r.value()
	switch x := v.(type) {
	case nil:
		return nil
	case encoding.Symbol:
		return []encoding.Symbol{x}
	case *encoding.Array:
		out := make([]encoding.Symbol, 0, len(x.Items))
		for _, it := range x.Items {
			s, ok := it.(encoding.Symbol)
			if !ok {
				r.setErr(fmt.Errorf("expected symbol array, got %T", it))
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	r.setErr(fmt.Errorf("expected symbols, got %T", v))
	return nil
}

func (r *reader) errorField() *Error {
	raw := r.next()
	if encoding.IsNull(raw) {
		return nil
	}
	code, _, val, _, err := encoding.SplitDescribed(raw)
	if err != nil || code != CodeError {
		r.setErr(fmt.Errorf("expected error: %v", err))
		return nil
	}
	erv, err := newReader(val)
	er := &erv
	if err != nil {
		r.setErr(err)
		return nil
	}
	e := &Error{}
	e.Condition = encoding.Symbol(er.string())
	e.Description = er.string()
	e.Info = er.mapField()
	r.setErr(er.err)
	return e
}

func (r *reader) state() DeliveryState {
	raw := r.next()
	if encoding.IsNull(raw) {
		return nil
	}
	st, err := parseState(raw)
	r.setErr(err)
	return st
}

func (r *reader) source() *Source {
	raw := r.next()
	if encoding.IsNull(raw) {
		return nil
	}
	code, _, val, _, err := encoding.SplitDescribed(raw)
	if err != nil || code != CodeSource {
		r.setErr(fmt.Errorf("expected source: %v", err))
		return nil
	}
	srv, err := newReader(val)
	sr := &srv
	if err != nil {
		r.setErr(err)
		return nil
	}
	s := &Source{}
	s.Address = sr.address()
	s.Durable = sr.uint32(false)
	s.ExpiryPolicy = encoding.Symbol(sr.string())
	s.Timeout = sr.uint32(false)
	s.Dynamic = sr.bool()
	s.DynamicNodeProperties = sr.mapField()
	s.DistributionMode = encoding.Symbol(sr.string())
	s.Filter = sr.mapField()
	s.DefaultOutcome = sr.value()
	s.Outcomes = sr.symbols()
	s.Capabilities = sr.symbols()
	r.setErr(sr.err)
	return s
}

func (r *reader) target() *Target {
	raw := r.next()
	if encoding.IsNull(raw) {
		return nil
	}
	code, _, val, _, err := encoding.SplitDescribed(raw)
	if err == nil && code == CodeCoordinator {
		crv, err := newReader(val)
		if err != nil {
			r.setErr(err)
			return nil
		}
		t := &Target{Coordinator: true}
		t.Capabilities = crv.symbols()
		r.setErr(crv.err)
		return t
	}
	if err != nil || code != CodeTarget {
		r.setErr(fmt.Errorf("expected target: %v", err))
		return nil
	}
	trv, err := newReader(val)
	tr := &trv
	if err != nil {
		r.setErr(err)
		return nil
	}
	t := &Target{}
	t.Address = tr.address()
	t.Durable = tr.uint32(false)
	t.ExpiryPolicy = encoding.Symbol(tr.string())
	t.Timeout = tr.uint32(false)
	t.Dynamic = tr.bool()
	t.DynamicNodeProperties = tr.mapField()
	t.Capabilities = tr.symbols()
	r.setErr(tr.err)
	return t
}

// address reads an address, which may be a string or a symbol.
func (r *reader) address() string { return r.string() }

// writer builds a described list, dropping trailing null fields.
type writer struct {
	b       []byte
	off     int // offset of the list constructor
	n       int // fields written
	lastEnd int // end of the last non-null field
	lastN   int // count up to the last non-null field
}

func start(b []byte, code uint64) *writer {
	b = encoding.AppendDescriptor(b, code)
	b, off := encoding.ListStart(b)
	return &writer{b: b, off: off, lastEnd: len(b)}
}

func (w *writer) mark() {
	w.n++
	w.lastEnd, w.lastN = len(w.b), w.n
}

func (w *writer) null() {
	w.b = encoding.AppendNull(w.b)
	w.n++
}

func (w *writer) str(s string, present bool) {
	if !present {
		w.null()
		return
	}
	w.b = encoding.AppendString(w.b, s)
	w.mark()
}

func (w *writer) sym(s encoding.Symbol) {
	if s == "" {
		w.null()
		return
	}
	w.b = encoding.AppendSymbol(w.b, s)
	w.mark()
}

func (w *writer) uint(v uint32, present bool) {
	if !present {
		w.null()
		return
	}
	w.b = encoding.AppendUint(w.b, v)
	w.mark()
}

func (w *writer) optUint(v *uint32) {
	if v == nil {
		w.null()
		return
	}
	w.uint(*v, true)
}

func (w *writer) ulong(v uint64, present bool) {
	if !present {
		w.null()
		return
	}
	w.b = encoding.AppendUlong(w.b, v)
	w.mark()
}

func (w *writer) ushort(v uint16, present bool) {
	if !present {
		w.null()
		return
	}
	w.b = encoding.AppendUshort(w.b, v)
	w.mark()
}

func (w *writer) ubyte(v uint8) {
	w.b = encoding.AppendUbyte(w.b, v)
	w.mark()
}

func (w *writer) bool(v, present bool) {
	if !present {
		w.null()
		return
	}
	w.b = encoding.AppendBool(w.b, v)
	w.mark()
}

func (w *writer) symbols(s []encoding.Symbol) {
	if s == nil {
		w.null()
		return
	}
	w.b, _ = encoding.Append(w.b, s)
	w.mark()
}

func (w *writer) binary(p []byte) {
	if p == nil {
		w.null()
		return
	}
	w.b, _ = encoding.Append(w.b, p)
	w.mark()
}

func (w *writer) mapv(m encoding.Map) {
	if m == nil {
		w.null()
		return
	}
	w.b, _ = encoding.Append(w.b, m)
	w.mark()
}

func (w *writer) value(v any) {
	if v == nil {
		w.null()
		return
	}
	w.b, _ = encoding.Append(w.b, v)
	w.mark()
}

func (w *writer) errorv(e *Error) {
	if e == nil {
		w.null()
		return
	}
	w.b = appendError(w.b, e)
	w.mark()
}

func (w *writer) state(s DeliveryState) {
	if s == nil {
		w.null()
		return
	}
	w.b = AppendState(w.b, s)
	w.mark()
}

func (w *writer) end() []byte {
	return encoding.ListEnd(w.b[:w.lastEnd], w.off, w.lastN)
}
