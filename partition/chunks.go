package partition

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/fsm"
)

// Chunked sends (Config.ChunkBytes; docs/fsm.md, "Chunked bodies"). A payload larger
// than ChunkBytes is proposed as fsm.BodyChunk commands, at most ChunkWindow of them in
// flight, each in an entry without another chunk (runProposer), and the message itself
// then as one fsm.EnqueueUploaded naming the upload. The message is stored with its
// whole body or not at all: a chunk that fails leaves an upload the final command never
// names, which the fsm drops at its deadline; a refused final command drops its chunks.

// sendMaybeChunked stores msgs as Enqueue (or Schedule) would, proposing the payloads
// larger than ChunkBytes as chunks first.
func (p *Partition) sendMaybeChunked(ctx context.Context, msgs []*fsm.Message, schedule bool) (fsm.Result, error) {
	if err := p.cfg.Bodies.admit(); err != nil {
		return fsm.Result{}, err
	}
	var refs []fsm.UploadRef
	var out []*fsm.Message
	for i, m := range msgs {
		if p.cfg.ChunkBytes <= 0 || m == nil || len(m.Payload) <= p.cfg.ChunkBytes {
			continue
		}
		if refs == nil {
			refs, out = make([]fsm.UploadRef, len(msgs)), append([]*fsm.Message(nil), msgs...)
		}
		id := uploadID()
		n, err := p.upload(ctx, id, m.Payload)
		if err != nil {
			return fsm.Result{}, err
		}
		refs[i] = fsm.UploadRef{Upload: id, Chunks: n}
		cp := *m
		cp.Payload = nil
		out[i] = &cp
	}
	switch {
	case refs != nil:
		return p.propose(ctx, &fsm.EnqueueUploaded{Schedule: schedule, Messages: out, Bodies: refs})
	case schedule:
		return p.propose(ctx, &fsm.Schedule{Messages: msgs})
	default:
		return p.propose(ctx, &fsm.Enqueue{Messages: msgs})
	}
}

// upload proposes body as chunks of upload id and returns their count once every chunk
// is applied. Its errors are definite: the message was not stored, whatever happened to
// the chunks.
func (p *Partition) upload(ctx context.Context, id string, body []byte) (uint32, error) {
	deadline := max(p.clock.Now().UnixMilli(), p.m.now.Load()) + p.cfg.UploadTimeout.Milliseconds()
	var inflight []*proposal
	var firstErr error
	wait := func() {
		res, err := p.await(ctx, inflight[0])
		inflight = inflight[1:]
		if err == nil {
			err = resultErr("chunk", res.Err)
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	var n uint32
	for off := 0; off < len(body) && firstErr == nil; off += p.cfg.ChunkBytes {
		if len(inflight) >= p.cfg.ChunkWindow {
			wait()
			if firstErr != nil {
				break
			}
		}
		c := &fsm.BodyChunk{Upload: id, Index: n, Deadline: deadline, Data: body[off:min(off+p.cfg.ChunkBytes, len(body))]}
		pr, err := p.submit(ctx, c)
		if err != nil {
			firstErr = err
			break
		}
		inflight = append(inflight, pr)
		n++
	}
	for len(inflight) > 0 {
		wait() // every submitted proposal is awaited, so none outlives the call
	}
	if firstErr != nil {
		p.abandonUpload(ctx, id)
		return 0, definite(ctx, firstErr)
	}
	return n, nil
}

// abandonUpload asks the fsm, best effort, to drop what it holds of upload id now rather
// than at the deadline, so that a sender that gave up (its context ended, a chunk was
// refused) does not keep quota held for UploadTimeout. An EnqueueUploaded naming the
// upload with zero chunks consumes it and stores nothing (fsm.ErrUploadIncomplete). It
// follows the chunks in the log, so no chunk can arrive after it. A replica that no
// longer leads leaves the drop to the deadline.
func (p *Partition) abandonUpload(ctx context.Context, id string) {
	if p.raft.State() != raft.Leader {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonPatience)
	defer cancel()
	_, _ = p.propose(ctx, &fsm.EnqueueUploaded{Messages: []*fsm.Message{{}}, Bodies: []fsm.UploadRef{{Upload: id}}})
}

// abandonPatience bounds how long a failed chunked send spends dropping its chunks.
const abandonPatience = 5 * time.Second

// definite strips "outcome unknown" from an error of the chunk phase: whether the chunk
// committed or not, the message was not stored, since its final command was never
// proposed.
func definite(ctx context.Context, err error) error {
	var nl *NotLeaderError
	if errors.As(err, &nl) && nl.Unknown {
		cp := *nl
		cp.Unknown = false
		return &cp
	}
	if errors.Is(err, ErrOutcomeUnknown) && ctx.Err() != nil {
		return ctxErr(ctx, false)
	}
	return err
}

// PendingUploads lists the chunked bodies this replica holds that no final command has
// consumed yet (the fsm drops them at their deadline). Any replica answers.
func (p *Partition) PendingUploads() []fsm.PendingUpload {
	var out []fsm.PendingUpload
	p.m.read(func(f *fsm.FSM) { out = f.PendingUploads() })
	return out
}

// uploadID is a fresh upload id, unique with overwhelming probability (the leader
// chooses it; the fsm only compares it).
func uploadID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
