package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/admin"
)

// backupCluster is a fakeCluster that writes a small archive, or cuts it after cutAfter
// bytes of the partition image, and takes restores.
type backupCluster struct {
	fakeCluster
	cut      bool
	restored []byte
	refuse   error
}

func (b *backupCluster) Backup(_ context.Context, w io.Writer) error {
	image := bytes.Repeat([]byte("image "), 50_000)
	sum := sha256.Sum256(image)
	aw := admin.NewArchiveWriter(w, time.Unix(0, 0))
	man := admin.Manifest{Format: admin.BackupFormat, Version: admin.BackupVersion, Queues: 1, Bytes: int64(len(image)),
		Partitions: []admin.ManifestPartition{{File: "partitions/0.qbfs", Entity: "q", Size: int64(len(image)),
			SHA256: hex.EncodeToString(sum[:])}}}
	if err := aw.JSON(admin.ManifestMember, &man); err != nil {
		return err
	}
	if err := aw.JSON(admin.MetadataMember, &admin.Metadata{}); err != nil {
		return err
	}
	var r io.Reader = bytes.NewReader(image)
	if b.cut {
		r = io.MultiReader(bytes.NewReader(image[:len(image)/2]), errReader{errors.New("the leader went away")})
	}
	if err := aw.Member("partitions/0.qbfs", int64(len(image)), r); err != nil {
		return err
	}
	return aw.Close()
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func (b *backupCluster) Restore(_ context.Context, r io.Reader) (admin.RestoreResult, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return admin.RestoreResult{}, err
	}
	if b.refuse != nil {
		return admin.RestoreResult{}, b.refuse
	}
	b.restored = data
	return admin.RestoreResult{Queues: 1, Partitions: 1, Bytes: int64(len(data))}, nil
}

// backup create writes FILE only when the whole archive arrived with its sums; a stream
// the server cuts leaves no file and says so. backup restore sends the file and reports
// the server's refusals in words.
func TestBackupCreateAndRestore(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "b.tar")
	bc := &backupCluster{}
	qb := adminNode(t, bc)
	out, errOut, err := qb("backup", "create", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "backup written to "+file+": 1 queues, 0 topics, 1 partitions") || errOut != "" {
		t.Fatalf("stdout %q, stderr %q (no progress off a terminal)", out, errOut)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.VerifyArchive(f); err != nil {
		t.Fatalf("the written archive does not verify: %v", err)
	}
	f.Close()

	out, _, err = qb("backup", "restore", file, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(file)
	if !bytes.Equal(bc.restored, want) || !strings.Contains(out, `"Partitions": 1`) {
		t.Fatalf("restore sent %d bytes of %d; printed %s", len(bc.restored), len(want), out)
	}
	bc.refuse = fmt.Errorf("%w: member partitions/0.qbfs is corrupt", admin.ErrBadArchive)
	if _, _, err := qb("backup", "restore", file); err == nil ||
		!strings.Contains(err.Error(), "the archive was refused, nothing was restored") || !strings.Contains(err.Error(), "partitions/0.qbfs is corrupt") {
		t.Fatalf("refused archive: %v", err)
	}
	bc.refuse = fmt.Errorf("%w: it has 3 queues and topics", admin.ErrNotEmpty)
	if _, _, err := qb("backup", "restore", file); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("non-empty cluster: %v", err)
	}

	cut := filepath.Join(dir, "cut.tar")
	bc.cut = true
	if _, _, err := qb("backup", "create", cut); err == nil || !strings.Contains(err.Error(), "was not written") {
		t.Fatalf("a cut stream: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "b.tar" {
			t.Errorf("a cut backup left %s behind", e.Name())
		}
	}
}
