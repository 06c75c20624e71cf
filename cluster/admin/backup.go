package admin

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// A backup archive (docs/operations.md § Backup and restore) is a tar stream:
//
//	manifest.json         Manifest: what the archive holds, each partition's size and SHA-256
//	metadata.json         Metadata: queues, topics, subscriptions with their rules, SAS keys
//	partitions/N.qbfs     one per partition: its fsm snapshot (docs/fsm.md), N from 0
//	SHA256SUMS            the SHA-256 of every member before it, as sha256sum writes them
//
// SHA256SUMS comes last, so an archive cut short lacks it, and a changed byte shows as
// a member whose sum differs (or as a tar header whose checksum fails).

// Archive member names.
const (
	ManifestMember = "manifest.json"
	MetadataMember = "metadata.json"
	SumsMember     = "SHA256SUMS"
	// BackupFormat is Manifest.Format.
	BackupFormat = "quorumbus-backup"
	// BackupVersion is the archive layout this release writes and reads.
	BackupVersion = 1
)

// Manifest describes a backup archive.
type Manifest struct {
	Format     string              `json:"format"`
	Version    int                 `json:"version"`
	CreatedAt  time.Time           `json:"createdAt"`
	Node       string              `json:"node"` // the node that wrote it
	Queues     int                 `json:"queues"`
	Topics     int                 `json:"topics"`
	Partitions []ManifestPartition `json:"partitions"`
	Bytes      int64               `json:"bytes"` // the partitions' images, in total
}

// ManifestPartition is one partition's image in the archive.
type ManifestPartition struct {
	File   string `json:"file"`
	Entity string `json:"entity"`
	Index  int    `json:"partition"`
	Group  uint32 `json:"groupId"` // in the cluster backed up
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// TakenAt is when the image was taken (after a Raft barrier on the group's leader).
	TakenAt time.Time `json:"takenAt"`
}

// Metadata is the archive's metadata member: every entity as declared, and the keys.
type Metadata struct {
	// Namespace is the backed-up namespace's name, for the record: a restore keeps the
	// new cluster's own.
	Namespace string        `json:"namespace"`
	Queues    []meta.Queue  `json:"queues"`
	Topics    []BackupTopic `json:"topics"`
	Keys      []meta.SASKey `json:"keys"`
}

// BackupTopic is a topic with its subscriptions (creation order) and their rules.
type BackupTopic struct {
	meta.Topic
	Subscriptions []meta.Subscription `json:"subscriptions"`
}

// RestoreResult is the answer of POST /$cluster/restore.
type RestoreResult struct {
	Queues        int   `json:"queues"`
	Topics        int   `json:"topics"`
	Subscriptions int   `json:"subscriptions"`
	Keys          int   `json:"keys"`
	Partitions    int   `json:"partitions"`
	Bytes         int64 `json:"bytes"`
}

// Backups is the optional part of Config.Cluster that writes and restores backups
// (cluster.Ops implements it).
type Backups interface {
	// Backup writes an archive to w.
	Backup(ctx context.Context, w io.Writer) error
	// Restore reads an archive from r, checks all of it, then restores it into a
	// cluster that has no entity. A corrupt or truncated archive is refused with an
	// error wrapping ErrBadArchive, having changed nothing.
	Restore(ctx context.Context, r io.Reader) (RestoreResult, error)
}

var (
	// ErrBadArchive marks an archive that is not a complete, intact backup.
	ErrBadArchive = errors.New("admin: bad backup archive")
	// ErrNotEmpty marks a restore into a cluster that has entities already.
	ErrNotEmpty = errors.New("admin: the cluster is not empty")
)

func badArchive(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadArchive, fmt.Sprintf(format, args...))
}

// VerifyArchive reads a whole archive and checks it: a manifest first, every member's
// SHA-256 against SHA256SUMS, which must come last and list every member, and each
// partition the manifest names present with its size and SHA-256. It returns the
// manifest and the metadata. Errors wrap ErrBadArchive and say what is wrong.
func VerifyArchive(r io.Reader) (*Manifest, *Metadata, error) {
	var man *Manifest
	var md *Metadata
	err := walkArchive(r, func(name string, size int64, body io.Reader) error {
		switch name {
		case ManifestMember:
			man = &Manifest{}
			return decodeMember(name, body, man)
		case MetadataMember:
			md = &Metadata{}
			return decodeMember(name, body, md)
		}
		_, err := io.Copy(io.Discard, body)
		return err
	}, func(sums map[string]string, sizes map[string]int64) error {
		if man.Format != BackupFormat || man.Version != BackupVersion {
			return badArchive("%s names format %q version %d; this release reads %q version %d",
				ManifestMember, man.Format, man.Version, BackupFormat, BackupVersion)
		}
		for _, p := range man.Partitions {
			switch {
			case sums[p.File] == "":
				return badArchive("partition %d of %q (%s) is missing", p.Index, p.Entity, p.File)
			case sizes[p.File] != p.Size || sums[p.File] != p.SHA256:
				return badArchive("%s is not the image the manifest describes (size %d, SHA-256 %s; the manifest says %d, %s)",
					p.File, sizes[p.File], sums[p.File], p.Size, p.SHA256)
			}
		}
		if sums[MetadataMember] == "" {
			return badArchive("it has no %s", MetadataMember)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return man, md, nil
}

func decodeMember(name string, r io.Reader, v any) error {
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return badArchive("%s: %v", name, err)
	}
	return nil
}

// WalkArchive calls fn with each member of an archive, in order, and then checks the
// sums as VerifyArchive does (a caller that applies what it reads must have verified the
// archive first).
func WalkArchive(r io.Reader, fn func(name string, size int64, body io.Reader) error) error {
	return walkArchive(r, fn, nil)
}

func walkArchive(r io.Reader, fn func(name string, size int64, body io.Reader) error,
	check func(sums map[string]string, sizes map[string]int64) error) error {
	pr := &padReader{r: r}
	tr := tar.NewReader(pr)
	sums := map[string]string{}
	sizes := map[string]int64{}
	var order []string
	last := "its start"
	for {
		h, err := tr.Next()
		switch {
		case err == io.EOF:
			if len(order) == 0 {
				return badArchive("it is empty")
			}
			return badArchive("it is truncated: it ends after %s without its %s trailer", last, SumsMember)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badArchive("it is truncated after %s", last)
		case err != nil:
			return badArchive("it is corrupt: the tar header after %s is damaged (%v)", last, err)
		}
		if err := pr.err; err != nil {
			return badArchive("it is corrupt after %s: %v", last, err)
		}
		// The header checksum covers every byte of the block but its own field, which
		// the reader parses leniently: require the form the writer gives it (six octal
		// digits, NUL, space), so that no byte of a header can change unseen.
		if len(pr.tail) != 512 || !canonicalChecksum(pr.tail[148:156]) {
			return badArchive("it is corrupt after %s: the header of %q is malformed", last, h.Name)
		}
		if h.Typeflag != tar.TypeReg || h.Size < 0 {
			return badArchive("it is corrupt after %s: member %q is not a regular file", last, h.Name)
		}
		name := h.Name
		pr.zeroFrom, pr.zeroTo = pr.n+h.Size, (pr.n+h.Size+511)/512*512
		if len(order) == 0 && name != ManifestMember {
			return badArchive("it does not start with %s (it starts with %q): not a Quorumbus backup", ManifestMember, name)
		}
		if _, dup := sums[name]; dup || name == "" {
			return badArchive("member %q appears twice", name)
		}
		hash := sha256.New()
		body := io.TeeReader(tr, hash)
		if name == SumsMember {
			end := pr.zeroTo
			b, err := io.ReadAll(io.LimitReader(body, 1<<24))
			if err != nil {
				return truncated(name, err)
			}
			if err := checkSums(string(b), order, sums); err != nil {
				return err
			}
			if _, err := tr.Next(); err != io.EOF {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return badArchive("it is truncated after %s", SumsMember)
				}
				if err == nil {
					return badArchive("members follow %s", SumsMember)
				}
				return badArchive("it is corrupt after %s: %v", SumsMember, err)
			}
			if pr.err != nil {
				return badArchive("it is corrupt after %s: %v", SumsMember, pr.err)
			}
			if pr.n < end+1024 { // the reader takes a missing end (two zero blocks) for an end
				return badArchive("it is truncated after %s", SumsMember)
			}
			if n, _ := io.Copy(io.Discard, pr); n > 0 || pr.err != nil {
				return badArchive("it has %d bytes after its end", n)
			}
			if check != nil {
				return check(sums, sizes)
			}
			return nil
		}
		var n int64
		cr := &countReader{r: body, n: &n}
		if err := fn(name, h.Size, cr); err != nil {
			if errors.Is(err, ErrBadArchive) {
				return err
			}
			return truncated(name, err)
		}
		if _, err := io.Copy(io.Discard, cr); err != nil { // what fn left unread
			return truncated(name, err)
		}
		sums[name] = hex.EncodeToString(hash.Sum(nil))
		sizes[name] = n
		order = append(order, name)
		last = name
	}
}

// checkSums compares SHA256SUMS with the sums computed while reading.
func checkSums(text string, order []string, sums map[string]string) error {
	listed := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			return badArchive("%s: bad line %q", SumsMember, line)
		}
		listed[name] = sum
	}
	for _, name := range order {
		want, ok := listed[name]
		switch {
		case !ok:
			return badArchive("%s does not list member %s", SumsMember, name)
		case want != sums[name]:
			return badArchive("member %s is corrupt: its SHA-256 is %s, %s says %s", name, sums[name], SumsMember, want)
		}
		delete(listed, name)
	}
	for name := range listed {
		return badArchive("member %s listed in %s is missing", name, SumsMember)
	}
	return nil
}

func truncated(name string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badArchive("it is truncated in member %s", name)
	}
	return fmt.Errorf("reading member %s: %w", name, err)
}

// canonicalChecksum reports whether a header's checksum field is as tar.Writer writes
// it: six octal digits, NUL, space.
func canonicalChecksum(f []byte) bool {
	for _, c := range f[:6] {
		if c < '0' || c > '7' {
			return false
		}
	}
	return f[6] == 0 && f[7] == ' '
}

// padReader passes an archive through, counting its bytes, and records an error when a
// byte in [zeroFrom, zeroTo) (a member's padding) is not zero.
type padReader struct {
	r                io.Reader
	n                int64
	zeroFrom, zeroTo int64
	err              error
	// tail is the last 512 bytes read: after tar.Reader.Next, the header block (USTAR,
	// no PAX records: the padding before it was read first).
	tail []byte
}

func (p *padReader) Read(b []byte) (int, error) {
	k, err := p.r.Read(b)
	p.tail = append(p.tail, b[:k]...)
	if len(p.tail) > 512 {
		p.tail = append(p.tail[:0], p.tail[len(p.tail)-512:]...)
	}
	for i := max(p.zeroFrom-p.n, 0); i < int64(k) && p.n+i < p.zeroTo; i++ {
		if b[i] != 0 && p.err == nil {
			p.err = fmt.Errorf("non-zero padding at byte %d", p.n+i)
		}
	}
	p.n += int64(k)
	return k, err
}

type countReader struct {
	r io.Reader
	n *int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// ArchiveWriter writes an archive: members in order, then Close writes SHA256SUMS.
type ArchiveWriter struct {
	tw   *tar.Writer
	now  time.Time
	sums strings.Builder
}

// NewArchiveWriter starts an archive on w; now stamps its members.
func NewArchiveWriter(w io.Writer, now time.Time) *ArchiveWriter {
	// USTAR with whole seconds: no PAX records, so every byte of the archive is in a
	// header (covered by its checksum), in a member (covered by SHA256SUMS), or padding,
	// which must be zero (walkArchive).
	return &ArchiveWriter{tw: tar.NewWriter(w), now: now.Truncate(time.Second)}
}

// Member writes one member of size bytes read from r.
func (a *ArchiveWriter) Member(name string, size int64, r io.Reader) error {
	if err := a.tw.WriteHeader(&tar.Header{Name: name, Size: size, Mode: 0o600, ModTime: a.now, Format: tar.FormatUSTAR}); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(a.tw, h), io.LimitReader(r, size))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("%s: %d bytes of %d", name, n, size)
	}
	fmt.Fprintf(&a.sums, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), name)
	return nil
}

// JSON writes v as a member.
func (a *ArchiveWriter) JSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	return a.Member(name, int64(len(b)), strings.NewReader(string(b)))
}

// Close writes SHA256SUMS and the tar end.
func (a *ArchiveWriter) Close() error {
	s := a.sums.String()
	if err := a.tw.WriteHeader(&tar.Header{Name: SumsMember, Size: int64(len(s)), Mode: 0o600, ModTime: a.now, Format: tar.FormatUSTAR}); err != nil {
		return err
	}
	if _, err := io.WriteString(a.tw, s); err != nil {
		return err
	}
	return a.tw.Close()
}

// serveBackup answers GET /$cluster/backup (the archive, streamed) and POST
// /$cluster/restore (an archive as the body; a RestoreResult).
func (h *Handler) serveBackup(w http.ResponseWriter, r *http.Request, op string) error {
	b, ok := h.cfg.Cluster.(Backups)
	if !ok {
		return errorf(http.StatusNotImplemented, "this node cannot take or restore backups")
	}
	rc := http.NewResponseController(w)
	if op == "backup" {
		// The images are taken before the first byte is written; the per-write deadline
		// applies from then on.
		_ = rc.SetWriteDeadline(time.Time{})
		cw := &committedWriter{w: w, rc: rc}
		err := b.Backup(r.Context(), cw)
		if err != nil && cw.started {
			// The status is sent: cut the stream, which leaves the archive without its
			// trailer, so that qbctl (and any reader) sees it is incomplete.
			h.log.Error("admin: backup failed after it started streaming", "err", err)
			panic(http.ErrAbortHandler)
		}
		return err
	}
	// A restore's body may take longer than the read timeout to arrive.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	res, err := b.Restore(r.Context(), r.Body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// committedWriter sends the archive's headers on its first write.
type committedWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (c *committedWriter) Write(p []byte) (int, error) {
	if !c.started {
		c.started = true
		c.w.Header().Set("Content-Type", "application/x-tar")
		c.w.WriteHeader(http.StatusOK)
	}
	n, err := c.w.Write(p)
	if err == nil {
		_ = c.rc.Flush()
	}
	return n, err
}
