package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

func testArchive(t *testing.T) []byte {
	t.Helper()
	images := [][]byte{bytes.Repeat([]byte("a"), 700), []byte("bb"), {}}
	man := Manifest{Format: BackupFormat, Version: BackupVersion, Queues: 1}
	for i, im := range images {
		sum := sha256.Sum256(im)
		man.Partitions = append(man.Partitions, ManifestPartition{File: "partitions/" + string(rune('0'+i)) + ".qbfs",
			Entity: "q", Index: i, Size: int64(len(im)), SHA256: hex.EncodeToString(sum[:])})
	}
	var buf bytes.Buffer
	aw := NewArchiveWriter(&buf, time.Unix(1700000000, 123456789))
	if err := aw.JSON(ManifestMember, &man); err != nil {
		t.Fatal(err)
	}
	if err := aw.JSON(MetadataMember, &Metadata{Queues: []meta.Queue{{Name: "q"}}}); err != nil {
		t.Fatal(err)
	}
	for i, im := range images {
		if err := aw.Member(man.Partitions[i].File, int64(len(im)), bytes.NewReader(im)); err != nil {
			t.Fatal(err)
		}
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every archive cut short and every archive with one byte changed, wherever, is
// refused as a bad archive; the intact one verifies.
func TestVerifyArchiveRefusesEveryTruncationAndEveryChangedByte(t *testing.T) {
	a := testArchive(t)
	man, md, err := VerifyArchive(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Partitions) != 3 || len(md.Queues) != 1 {
		t.Fatalf("manifest %+v, metadata %+v", man, md)
	}
	for n := range len(a) {
		if _, _, err := VerifyArchive(bytes.NewReader(a[:n])); !errors.Is(err, ErrBadArchive) {
			t.Fatalf("cut at %d of %d: %v", n, len(a), err)
		}
	}
	for i := range a {
		for _, mask := range []byte{1 << (i % 8), 0xff} {
			b := bytes.Clone(a)
			b[i] ^= mask
			if _, _, err := VerifyArchive(bytes.NewReader(b)); !errors.Is(err, ErrBadArchive) {
				t.Fatalf("byte %d of %d changed (xor %#x): %v", i, len(a), mask, err)
			}
		}
	}
	if _, _, err := VerifyArchive(bytes.NewReader(append(bytes.Clone(a), 0))); !errors.Is(err, ErrBadArchive) {
		t.Fatalf("a byte appended: %v", err)
	}
}
