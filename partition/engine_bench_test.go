package partition

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// BenchmarkLogEngine compares the candidates for one log engine per node: N groups
// append concurrently, each a 1 KiB entry per StoreLogs call in order, as N busy
// partitions' raft goroutines do. It reports appends/s; fsyncs per append come from
// running it under strace (docs/benchmarks.md, "Log engine: one per node"):
//
//	go test -c -o /tmp/pb ./partition/
//	strace -f --seccomp-bpf -c -e trace=fsync,fdatasync /tmp/pb -test.run='^$' \
//	    -test.bench='LogEngine/shared/groups=64$' -test.benchtime=4000x
//
// Candidates: "bolt" is today's raft-boltdb file per group; "bolt-batch" is one bbolt
// file per node with a bucket per group and DB.Batch coalescing concurrent commits;
// "pebble" is one pebble engine per node with a synced batch per append (its commit
// pipeline shares one WAL fsync among concurrent batches); "shared" is the engine
// chosen (engine.go), measured through its raft.LogStore.
func BenchmarkLogEngine(b *testing.B) {
	for _, kind := range []string{"bolt", "bolt-batch", "pebble", "shared"} {
		for _, groups := range []int{1, 64, 256} {
			b.Run(fmt.Sprintf("%s/groups=%d", kind, groups), func(b *testing.B) {
				benchLogEngine(b, kind, groups)
			})
		}
	}
}

func benchLogEngine(b *testing.B, kind string, groups int) {
	dir := b.TempDir()
	data := make([]byte, 1024)
	var appenders []func(idx uint64) error
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	switch kind {
	case "bolt":
		for g := range groups {
			gdir := filepath.Join(dir, strconv.Itoa(g))
			if err := os.MkdirAll(gdir, 0o750); err != nil {
				b.Fatal(err)
			}
			s, err := openLogStore(gdir, LogStoreBolt, nil, false, hclog.NewNullLogger())
			if err != nil {
				b.Fatal(err)
			}
			closers = append(closers, func() { s.Close() })
			appenders = append(appenders, func(idx uint64) error {
				return s.StoreLogs([]*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}})
			})
		}
	case "bolt-batch":
		db, err := bbolt.Open(filepath.Join(dir, "raft.db"), 0o600, &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, func() { db.Close() })
		for g := range groups {
			name := []byte(strconv.Itoa(g))
			if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket(name); return err }); err != nil {
				b.Fatal(err)
			}
			appenders = append(appenders, func(idx uint64) error {
				return db.Batch(func(tx *bbolt.Tx) error {
					var k [8]byte
					binary.BigEndian.PutUint64(k[:], idx)
					return tx.Bucket(name).Put(k[:], data)
				})
			})
		}
	case "pebble":
		db, err := pebble.Open(filepath.Join(dir, "pebble"), &pebble.Options{Logger: pebbleLogger{hclog.NewNullLogger()}})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, func() { db.Close() })
		for g := range groups {
			appenders = append(appenders, func(idx uint64) error {
				var k [12]byte
				binary.BigEndian.PutUint32(k[:], uint32(g))
				binary.BigEndian.PutUint64(k[4:], idx)
				batch := db.NewBatch()
				if err := batch.Set(k[:], data, nil); err != nil {
					return err
				}
				return batch.Commit(pebble.Sync)
			})
		}
	case "shared":
		e, err := OpenEngine(EngineConfig{Dir: filepath.Join(dir, "engine")})
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, func() { e.Close() })
		for g := range groups {
			s, err := e.openStore(filepath.Join(dir, strconv.Itoa(g)))
			if err != nil {
				b.Fatal(err)
			}
			appenders = append(appenders, func(idx uint64) error {
				return s.StoreLogs([]*raft.Log{{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}})
			})
		}
	}
	// Each group appends its share of b.N in order; the groups run concurrently.
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g, app := range appenders {
		n := b.N / groups
		if g < b.N%groups {
			n++
		}
		wg.Go(func() {
			for i := range n {
				if err := app(uint64(i + 1)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
}

// BenchmarkEngineDiskAfterDeletes: disk used by the node's engine (its directory) after
// 1,000 groups are created with 100 KiB of log each and then all removed, as 1,000
// queues with messages created and deleted are: full, right after the removals (range
// deletions hide the entries), once the engine's compactor has run (of which the
// sstables, the rest being write-ahead log files pebble keeps to recycle), and after a
// reopen (docs/benchmarks.md).
func BenchmarkEngineDiskAfterDeletes(b *testing.B) {
	const groups, entries = 1000, 100
	data := make([]byte, 1024)
	_, _ = crand.Read(data) // incompressible, as message bodies mostly are
	for range b.N {
		dir := b.TempDir()
		e, err := OpenEngine(EngineConfig{Dir: EngineDir(dir), DataDir: dir, Logger: hclog.NewNullLogger()})
		if err != nil {
			b.Fatal(err)
		}
		for g := range groups {
			gdir := Dir(dir, "q"+strconv.Itoa(g), 0)
			s, err := e.openStore(gdir)
			if err != nil {
				b.Fatal(err)
			}
			logs := make([]*raft.Log, entries)
			for i := range logs {
				logs[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}
			}
			if err := s.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
		full := dirBytes(b, EngineDir(dir))
		for g := range groups {
			if err := RemoveDir(Dir(dir, "q"+strconv.Itoa(g), 0), e); err != nil {
				b.Fatal(err)
			}
		}
		deleted := dirBytes(b, EngineDir(dir))
		start := time.Now()
		for e.compactionPending() && time.Since(start) < time.Minute {
			time.Sleep(10 * time.Millisecond) // polling the compactor, which signals nothing
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-compacting")
		compacted := dirBytes(b, EngineDir(dir))
		b.ReportMetric(float64(tableBytes(e))/(1<<20), "MiB-tables-compacted")
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
		e, err = OpenEngine(EngineConfig{Dir: EngineDir(dir), DataDir: dir, Logger: hclog.NewNullLogger()})
		if err != nil {
			b.Fatal(err)
		}
		reopened := dirBytes(b, EngineDir(dir))
		e.Close()
		b.ReportMetric(float64(full)/(1<<20), "MiB-full")
		b.ReportMetric(float64(deleted)/(1<<20), "MiB-deleted")
		b.ReportMetric(float64(compacted)/(1<<20), "MiB-compacted")
		b.ReportMetric(float64(reopened)/(1<<20), "MiB-reopened")
	}
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
