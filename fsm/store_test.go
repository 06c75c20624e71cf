package fsm

import (
	"math/rand"
	"slices"
	"testing"
)

// TestSeqIndexAgainstNaive compares seqIndex with a sorted slice under random puts
// (appends and inserts in the middle, as a DLQ sees), deletes, gets and ascends, with
// enough elements to split and merge chunks.
func TestSeqIndexAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var x seqIndex
	var naive []int64
	next := int64(0)
	for i := 0; i < 60_000; i++ {
		switch op := rng.Intn(10); {
		case op < 4: // append
			next += 2 * (1 + int64(rng.Intn(3))) // appends are even
			x.Put(&msg{seq: next})
			naive = append(naive, next)
		case op < 6: // insert a fresh seq somewhere in the middle
			s := 2*rng.Int63n(next/2+1) + 1 // odd: below the tail, unordered arrival
			if _, found := slices.BinarySearch(naive, s); found {
				continue
			}
			x.Put(&msg{seq: s})
			j, _ := slices.BinarySearch(naive, s)
			naive = slices.Insert(naive, j, s)
		case op < 9 && len(naive) > 0: // delete, biased to the front like a consumer
			j := rng.Intn(len(naive))
			if rng.Intn(2) == 0 {
				j = rng.Intn(min(len(naive), 10))
			}
			if m := x.Delete(naive[j]); m == nil || m.seq != naive[j] {
				t.Fatalf("delete %d: got %v", naive[j], m)
			}
			naive = slices.Delete(naive, j, j+1)
		default:
			s := rng.Int63n(next + 2)
			_, found := slices.BinarySearch(naive, s)
			if got := x.Get(s); (got != nil) != found {
				t.Fatalf("get %d: %v, naive found %v", s, got, found)
			}
			if x.Delete(-5) != nil {
				t.Fatal("deleted a missing seq")
			}
		}
		if x.Len() != len(naive) {
			t.Fatalf("len %d, naive %d", x.Len(), len(naive))
		}
		if i%1000 == 0 {
			from := rng.Int63n(next + 2)
			var got []int64
			x.Ascend(from, func(m *msg) bool { got = append(got, m.seq); return len(got) < 700 })
			j, _ := slices.BinarySearch(naive, from)
			want := naive[j:min(j+700, len(naive))]
			if !slices.Equal(got, want) {
				t.Fatalf("ascend from %d: %d items, want %d", from, len(got), len(want))
			}
		}
	}
	for _, c := range x.chunks {
		if len(c) == 0 || len(c) > chunkMax {
			t.Fatalf("chunk of %d", len(c))
		}
	}
}

// TestAvailQAgainstNaive compares availQ (ring + heap) with a sorted set under pushes
// in and out of order, pops of the minimum and removals from the middle.
func TestAvailQAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	st := &store{}
	a := availQ{owner: st}
	in := map[int64]*msg{}
	var out []*msg // messages not in the queue, available to push again
	next := int64(0)
	for i := 0; i < 50_000; i++ {
		switch op := rng.Intn(10); {
		case op < 4:
			next++
			m := &msg{seq: next, st: st, aidx: -1, hidx: -1}
			a.push(m)
			in[m.seq] = m
		case op < 6 && len(out) > 0: // back out of order
			j := rng.Intn(len(out))
			m := out[j]
			out = slices.Delete(out, j, j+1)
			a.push(m)
			in[m.seq] = m
		case op < 8: // pop the minimum
			m := a.peek()
			var min int64 = -1
			for s := range in {
				if min < 0 || s < min {
					min = s
				}
			}
			if (m == nil) != (min < 0) || (m != nil && m.seq != min) {
				t.Fatalf("peek %v, want %d", m, min)
			}
			if m != nil {
				a.remove(m)
				delete(in, m.seq)
				out = append(out, m)
			}
		default: // remove from the middle, for good (expiry)
			for s, m := range in {
				a.remove(m)
				delete(in, s)
				m.st = &store{} // it moved elsewhere
				break
			}
		}
		if a.empty() != (len(in) == 0) || a.n != len(in) {
			t.Fatalf("n %d, want %d", a.n, len(in))
		}
	}
}
