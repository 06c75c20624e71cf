// Command lazyfs mounts a lazy file system (package lazyfs) and serves it until told to
// unmount, until its standard input ends or until SIGINT or SIGTERM. The product
// module's tests run it through test/lazyfsctl, which builds it from this module.
//
//	lazyfs -name NAME DIR BACKING
//
// It mounts DIR over BACKING (both must exist; the mount's source shows as
// lazyfs-NAME) and answers on standard output with one JSON line: {} once mounted,
// {"error": "..."} when it could not mount (it then exits 1). Then it reads one command
// a line from standard input and answers each with one JSON line:
//
//	crash     {"dropped": {"path": bytes, ...}}  drop every unsynced page (Crash)
//	stats     {"stats": {"Syncs": n, "Crashes": n, "Dropped": n}}
//	unsynced  {"unsynced": bytes}
//	unmount   {} or {"error": "..."}, then it exits
//
// An unknown command gets {"error": "..."}. When standard input ends (the process that
// started it died, say), it unmounts and exits, so that no mount outlives its user.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/quorumbus/quorumbus/test/lazyfs"
)

// reply is one answer line.
type reply struct {
	Error    string           `json:"error,omitempty"`
	Dropped  map[string]int64 `json:"dropped,omitempty"`
	Stats    *lazyfs.Stats    `json:"stats,omitempty"`
	Unsynced *int64           `json:"unsynced,omitempty"`
}

func main() {
	name := flag.String("name", "", "tag of the mount: its source shows as lazyfs-NAME in /proc/mounts")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: lazyfs -name NAME DIR BACKING (commands on stdin: crash, stats, unsynced, unmount)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	l, err := lazyfs.Mount(flag.Arg(0), flag.Arg(1), *name)
	if err != nil {
		out.Encode(reply{Error: err.Error()})
		os.Exit(1)
	}
	out.Encode(reply{})

	// SIGINT (a ^C reaches the whole process group) and SIGTERM unmount as EOF does.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
	}()
	for {
		select {
		case s := <-sig:
			exit(l, fmt.Sprintf("lazyfs: %s: unmounting %s", s, flag.Arg(0)))
		case line, ok := <-lines:
			if !ok {
				exit(l, "")
			}
			switch line {
			case "crash":
				out.Encode(reply{Dropped: l.Crash()})
			case "stats":
				st := l.Stats()
				out.Encode(reply{Stats: &st})
			case "unsynced":
				n := l.Unsynced()
				out.Encode(reply{Unsynced: &n})
			case "unmount":
				if err := l.Unmount(); err != nil {
					out.Encode(reply{Error: err.Error()})
					os.Exit(1)
				}
				out.Encode(reply{})
				os.Exit(0)
			default:
				out.Encode(reply{Error: fmt.Sprintf("lazyfs: unknown command %q (want crash, stats, unsynced or unmount)", line)})
			}
		}
	}
}

// exit unmounts without anyone to answer (standard input ended, or a signal) and exits.
func exit(l *lazyfs.FS, why string) {
	if why != "" {
		fmt.Fprintln(os.Stderr, why)
	}
	if err := l.Unmount(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
