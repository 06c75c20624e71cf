// Package offsetclock is a wall clock whose offset from the machine's can be changed
// while a node runs, by writing it to a file. It exists for the fault suite: one node's
// clock can jump forward or back without touching the machine's clock, which a shared
// machine must not have moved, and which a Linux time namespace does not offset (it
// moves only the monotonic and boot-time clocks) and libfaketime cannot reach in a Go
// binary (Go reads the vDSO, not libc).
//
// The file holds a Go duration ("90s", "-2m", "0s"); a missing or empty file is 0. The
// clock reads it at start and then every poll interval. Timers armed by AfterFunc are
// due at a time on this clock, not after a span of real time: when the offset moves
// forward by J, a timer due in more than J fires J sooner, and one due in less fires at
// once, which is how a real clock jump looks to a process that computes deadlines from
// wall time.
package offsetclock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is a wall clock at an offset read from a file. It implements cluster.Clock and
// partition.Clock.
type Clock struct {
	path   string
	offset atomic.Int64 // nanoseconds added to time.Now

	mu     sync.Mutex
	timers map[*timer]struct{} // armed and not yet fired or stopped
	err    error               // the last error reading the file, nil once it reads

	done chan struct{}
	wg   sync.WaitGroup
}

type timer struct {
	due time.Time // on the clock
	f   func()
	t   *time.Timer // owner: Clock.mu
}

// New reads path once and then every poll until Close. A file that cannot be parsed
// keeps the last offset; Err reports why.
func New(path string, poll time.Duration) (*Clock, error) {
	c := &Clock{path: path, timers: map[*timer]struct{}{}, done: make(chan struct{})}
	if err := c.reload(); err != nil {
		return nil, err
	}
	c.wg.Add(1)
	go c.poll(poll)
	return c, nil
}

// Close stops polling the file; armed timers still fire.
func (c *Clock) Close() {
	close(c.done)
	c.wg.Wait()
}

// Now is the machine's wall clock plus the offset.
func (c *Clock) Now() time.Time { return time.Now().Add(c.Offset()) }

// Offset is the offset in force.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Err is the last error reading the offset file, nil when the last read succeeded.
func (c *Clock) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// AfterFunc calls f in its own goroutine once the clock reaches Now()+d. stop prevents
// that and reports whether it did (false once f has been started).
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	t := &timer{due: c.Now().Add(d), f: f}
	c.mu.Lock()
	c.timers[t] = struct{}{}
	c.armLocked(t)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.timers[t]; !ok {
			return false
		}
		delete(c.timers, t)
		t.t.Stop()
		return true
	}
}

// armLocked starts t's real timer for the time left until it is due.
func (c *Clock) armLocked(t *timer) {
	t.t = time.AfterFunc(max(t.due.Sub(c.Now()), 0), func() {
		c.mu.Lock()
		_, armed := c.timers[t]
		delete(c.timers, t)
		c.mu.Unlock()
		if armed {
			t.f()
		}
	})
}

func (c *Clock) poll(every time.Duration) {
	defer c.wg.Done()
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tk.C:
			_ = c.reload() // kept in Err
		}
	}
}

// reload reads the file and, when the offset changed, re-arms every timer for the time
// left on the moved clock.
func (c *Clock) reload() error {
	off, err := read(c.path)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	if err != nil || off == c.Offset() {
		return err
	}
	c.offset.Store(int64(off))
	for t := range c.timers {
		if t.t.Stop() {
			c.armLocked(t)
		}
	}
	return nil
}

func read(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("clock offset file %s: %q is not a duration such as 90s or -2m", path, s)
	}
	return d, nil
}
