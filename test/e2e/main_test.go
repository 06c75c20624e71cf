package e2e

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises the default -test.parallel (GOMAXPROCS, often 2) to 8: the parallel
// subtests of this package mostly wait on a broker subprocess (lock expiry, scheduled
// times, TTLs), so running more of them at once shortens the package a lot without
// loading the CPU. An explicit -parallel on the command line still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", "8"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
