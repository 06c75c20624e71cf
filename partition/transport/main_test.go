package transport

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if goroutines of this package or raft's transport outlive the
// tests (style.md testing habit 10).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var leaked []string
			for _, g := range strings.Split(string(buf), "\n\n") {
				if (strings.Contains(g, "partition/transport") || strings.Contains(g, "hashicorp/raft")) &&
					!strings.Contains(g, "TestMain") {
					leaked = append(leaked, g)
				}
			}
			if len(leaked) == 0 {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", strings.Join(leaked, "\n\n"))
				code = 1
				break
			}
			time.Sleep(50 * time.Millisecond) // polling for goroutines to finish
		}
	}
	os.Exit(code)
}
