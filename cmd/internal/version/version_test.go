package version

import (
	"runtime/debug"
	"testing"
)

// TestResolve: the linker's values win over the build info's, which win over the
// defaults; a work tree with changes marks the revision dirty.
func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name       string
		ldV, ldRev string
		bi         *debug.BuildInfo
		want       Info
	}{
		{"release build", "v1.2.0", "def456", vcs, Info{"v1.2.0", "def456", "go1.99"}},
		{"checkout build", "", "", vcs, Info{"devel", "abc123-dirty", "go1.99"}},
		{"go install @version", "", "", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.3.0"}},
			Info{"v1.3.0", "unknown", "go1.99"}},
	} {
		if got := resolve(tc.ldV, tc.ldRev, tc.bi); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := resolve("", "", nil); got.Version != "devel" || got.Revision != "unknown" || got.GoVersion == "" {
		t.Errorf("no build info: %+v", got)
	}
	if s := (Info{"v1.2.0", "abc", "go1.99"}).String(); s != "v1.2.0 (revision abc, go1.99)" {
		t.Errorf("String: %q", s)
	}
}
