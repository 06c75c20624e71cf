// Package version says which build of Quorumbus is running, for `quorumbus --version`,
// `qbctl version` and the quorumbus_build_info metric.
//
// The version and revision come from the linker when a release is built (the Makefile's
// build and image targets set them):
//
//	go build -ldflags "-X github.com/quorumbus/quorumbus/cmd/internal/version.version=v1.2.0 \
//	  -X github.com/quorumbus/quorumbus/cmd/internal/version.revision=$(git rev-parse HEAD)" ./cmd/...
//
// else from what the Go toolchain recorded in the binary (runtime/debug.ReadBuildInfo):
// the module version when installed with `go install ...@v1.2.0`, and the VCS revision
// of a build inside a git checkout (unless built with -buildvcs=false).
//
// Goroutines: none.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X) for release builds; empty otherwise.
var (
	version  string
	revision string
)

// Info is one build's identity.
type Info struct {
	// Version is the release ("v1.2.0"), or "devel" for a build that was not given one.
	Version string
	// Revision is the VCS commit the build was made from, with "-dirty" when the work
	// tree had changes, or "unknown".
	Revision string
	// GoVersion is the Go toolchain that built it ("go1.26.8").
	GoVersion string
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, revision, bi)
}

// resolve prefers the linker's values, then the build info's, then the defaults.
func resolve(ldVersion, ldRevision string, bi *debug.BuildInfo) Info {
	i := Info{Version: ldVersion, Revision: ldRevision, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		if v := bi.Main.Version; i.Version == "" && v != "" && v != "(devel)" {
			i.Version = v
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if i.Revision == "" && rev != "" {
			i.Revision = rev
			if modified == "true" {
				i.Revision += "-dirty"
			}
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	if i.Revision == "" {
		i.Revision = "unknown"
	}
	return i
}

// String is "v1.2.0 (revision 0123abc, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}
