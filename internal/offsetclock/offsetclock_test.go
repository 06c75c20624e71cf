package offsetclock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/test/testutil"
)

func newClock(t *testing.T, content string) (*Clock, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "offset")
	if content != "" {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(path, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, path
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMissingFileIsZero(t *testing.T) {
	c, _ := newClock(t, "")
	if off := c.Offset(); off != 0 {
		t.Fatalf("offset %v without a file, want 0", off)
	}
	if d := time.Until(c.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("Now is %v from the machine's clock", d)
	}
}

func TestOffsetFollowsTheFile(t *testing.T) {
	c, path := newClock(t, " 90s\n")
	if off := c.Offset(); off != 90*time.Second {
		t.Fatalf("offset %v at start, want 90s", off)
	}
	if d := time.Until(c.Now()); d < 89*time.Second || d > 91*time.Second {
		t.Fatalf("Now is %v ahead, want about 90s", d)
	}
	write(t, path, "-2m")
	testutil.WaitFor(t, 5*time.Second, func() error {
		if off := c.Offset(); off != -2*time.Minute {
			return errors.New("offset still " + off.String())
		}
		return nil
	})
}

func TestBadContentKeepsTheOffset(t *testing.T) {
	c, path := newClock(t, "5s")
	write(t, path, "soon")
	testutil.WaitFor(t, 5*time.Second, func() error {
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), `"soon" is not a duration`) {
			return errors.New("no error for a bad offset yet")
		}
		return nil
	})
	if off := c.Offset(); off != 5*time.Second {
		t.Fatalf("offset %v after a bad write, want 5s kept", off)
	}
	if _, err := New(path, time.Second); err == nil {
		t.Fatal("New accepted a file that holds no duration")
	}
}

// A timer is due at a time on the clock: a forward jump past it fires it at once, as a
// process computing deadlines from wall time sees a real jump.
func TestForwardJumpFiresTimersDue(t *testing.T) {
	c, path := newClock(t, "")
	fired := make(chan struct{})
	c.AfterFunc(time.Hour, func() { close(fired) })
	stopped := make(chan struct{})
	stop := c.AfterFunc(time.Hour, func() { close(stopped) })
	if !stop() {
		t.Fatal("stop of an armed timer reported false")
	}
	late := make(chan struct{})
	c.AfterFunc(3*time.Hour, func() { close(late) })

	write(t, path, "61m")
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("a timer due in 1h did not fire after a 61m jump")
	}
	select {
	case <-stopped:
		t.Fatal("a stopped timer fired")
	case <-late:
		t.Fatal("a timer due in 3h fired after a 61m jump")
	default:
	}
	if stop() {
		t.Fatal("stop reported true twice")
	}
}
