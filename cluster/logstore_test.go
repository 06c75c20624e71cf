package cluster

import (
	"strings"
	"testing"
)

// Storage.LogStore is checked when the node is configured, not when its first partition
// opens.
func TestConfigValidateLogStore(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{"", ""}, {"bolt", ""}, {"wal", ""}, {"shared", ""}, {"rocksdb", `Storage.LogStore "rocksdb": want "shared", "bolt" or "wal"`},
	} {
		c := testConfig(t.TempDir())
		c.Storage.LogStore = tc.store
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("LogStore %q: Validate() = %v, want %q", tc.store, err, tc.want)
		}
	}
}
