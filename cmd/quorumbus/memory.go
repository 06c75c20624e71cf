package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// Memory settings. Queued bodies are the bulk of a node's heap and are never garbage
// until they are received, so Go's default of letting the heap grow to twice its live
// size before collecting (GOGC=100) doubles the resident memory of a deep queue
// (docs/benchmarks.md, "memory per message"). --gc-headroom keeps the next collection
// that many percent of the live heap away (with a floor, gcFloor, so that a small heap is
// not collected constantly): 5 cuts the memory per queued message by two thirds but
// triples the node's CPU per message while the backlog is deep, since every collection
// marks every queued message, so it is off by default. --memory-limit is Go's soft limit
// (debug.SetMemoryLimit), by default 90 % of the container's cgroup limit when there is
// one: the collector works harder only when the process nears it.

// gcFloor is the least headroom the tuner leaves above the live heap.
const gcFloor = 8 << 20

// parseBytes reads a size such as 2GiB, 512MiB, 1500MB or 1073741824; "" and "0" mean none.
func parseBytes(v string) (int64, error) {
	s := strings.TrimSpace(v)
	if s == "" || s == "0" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: want a size such as 2GiB, 512MiB or a number of bytes", v)
	}
	return n * mult, nil
}

// cgroupLimit is the memory limit of the cgroup the process runs in (v2, then v1), 0
// when there is none.
func cgroupLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's "unlimited" page-rounded MaxInt64
			return 0
		}
		return n
	}
	return 0
}

// memorySettings is what applyMemory did, for the start-up log.
type memorySettings struct {
	limit    int64  // bytes; 0: none
	limitSrc string // "flag", "cgroup", "GOMEMLIMIT" or ""
	headroom int    // percent; 0: GOGC as the runtime has it
}

// applyMemory sets the soft memory limit and starts the GC headroom tuner. The GOGC and
// GOMEMLIMIT environment variables, when set, win over the defaults.
func applyMemory(cfg Config) (memorySettings, error) {
	var ms memorySettings
	limit, err := parseBytes(cfg.MemoryLimit)
	if err != nil {
		return ms, fmt.Errorf("--memory-limit %w", err)
	}
	switch {
	case limit > 0:
		ms.limit, ms.limitSrc = limit, "flag"
		debug.SetMemoryLimit(limit)
	case os.Getenv("GOMEMLIMIT") != "":
		ms.limit, ms.limitSrc = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	case cfg.MemoryLimit == "" && cgroupLimit() > 0:
		ms.limit, ms.limitSrc = cgroupLimit()/10*9, "cgroup"
		debug.SetMemoryLimit(ms.limit)
	}
	if cfg.GCHeadroom > 0 && os.Getenv("GOGC") == "" {
		ms.headroom = cfg.GCHeadroom
		startGCTuner(cfg.GCHeadroom)
	}
	return ms, nil
}

var tunerOnce sync.Once

// startGCTuner sets GOGC after every collection so that the next one starts when the
// heap has grown by pct % of its live size, or by gcFloor if that is more, and never
// later than GOGC=100 would. A finalizer on a fresh object runs once per collection.
func startGCTuner(pct int) {
	tunerOnce.Do(func() {
		t := &gcTuner{pct: pct, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}, last: 100}
		t.tune()
		t.arm()
	})
}

type gcTuner struct {
	pct    int
	sample []metrics.Sample
	last   int // GOGC set last; owner: the finalizer goroutine
}

// sentinel is large enough not to be batched by the tiny allocator, whose blocks are
// freed (and finalized) only when all their objects are.
type sentinel struct{ _ [32]byte }

func (t *gcTuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		t.tune()
		t.arm()
	})
}

func (t *gcTuner) tune() {
	metrics.Read(t.sample)
	gogc := gcPercent(t.sample[0].Value.Uint64(), t.pct)
	if gogc != t.last {
		debug.SetGCPercent(gogc)
		t.last = gogc
	}
}

// gcPercent is the GOGC that leaves max(pct % of live, gcFloor) of headroom, 1..100.
func gcPercent(live uint64, pct int) int {
	if live == 0 {
		return 100
	}
	headroom := max(live*uint64(pct)/100, gcFloor)
	return max(int(min((headroom*100+live-1)/live, 100)), 1)
}
