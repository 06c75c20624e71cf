package main

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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// backup create and backup restore use the cluster API's /$cluster/backup and
// /$cluster/restore (docs/admin-api.md, docs/operations.md § Backup and restore). The
// archive is a tar stream (manifest.json, metadata.json, partitions/N.qbfs, then
// SHA256SUMS); qbctl checks every member's SHA-256 as it writes the file and renames it
// into place only when the whole archive arrived intact.

// backupManifest mirrors the fields of cluster/admin.Manifest that qbctl shows.
type backupManifest struct {
	Format     string `json:"format"`
	Version    int    `json:"version"`
	Queues     int    `json:"queues"`
	Topics     int    `json:"topics"`
	Bytes      int64  `json:"bytes"`
	Partitions []struct {
		File string `json:"file"`
	} `json:"partitions"`
}

// restoreResult mirrors cluster/admin.RestoreResult.
type restoreResult struct {
	Queues        int   `json:"queues"`
	Topics        int   `json:"topics"`
	Subscriptions int   `json:"subscriptions"`
	Keys          int   `json:"keys"`
	Partitions    int   `json:"partitions"`
	Bytes         int64 `json:"bytes"`
}

func (g *globals) backupCmd() *cobra.Command {
	create := &cobra.Command{Use: "create FILE", Short: "write a backup of the whole cluster (entities, keys, every partition's messages) to FILE",
		Args: nArgs("FILE"), RunE: func(c *cobra.Command, a []string) error { return g.backupCreate(c.Context(), a[0]) }}
	restore := &cobra.Command{Use: "restore FILE", Short: "restore a backup into a new cluster that has no entities",
		Args: nArgs("FILE"), RunE: func(c *cobra.Command, a []string) error { return g.backupRestore(c.Context(), a[0]) }}
	return group("backup", "back up the cluster to a file, or restore one into a new cluster: create, restore", nil, create, restore)
}

// showProgress says whether to draw progress: on a terminal, not with -o json.
func (g *globals) showProgress() bool {
	return g.output != "json" && isTerminal(g.stdout) && isTerminal(g.stderr)
}

// byteProgress redraws "what: 12.0 MiB / 40.0 MiB, partitions 3/8" on a terminal.
type byteProgress struct {
	w          io.Writer
	on         bool
	what       string
	n, total   int64
	parts, all int
	last       time.Time
	drawn      bool
}

func (p *byteProgress) add(n int) {
	p.n += int64(n)
	p.draw(false)
}

func (p *byteProgress) draw(force bool) {
	if !p.on || (!force && time.Since(p.last) < 100*time.Millisecond) {
		return
	}
	p.last = time.Now()
	s := fmt.Sprintf("\r%s: %s", p.what, mib(p.n))
	if p.total > 0 {
		s += " / " + mib(p.total)
	}
	if p.all > 0 {
		s += fmt.Sprintf(", partitions %d/%d", p.parts, p.all)
	}
	fmt.Fprint(p.w, s+"   ")
	p.drawn = true
}

func (p *byteProgress) finish() {
	if p.drawn {
		p.draw(true)
		fmt.Fprintln(p.w)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

type countingReader struct {
	r io.Reader
	p *byteProgress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.add(n)
	return n, err
}

func (g *globals) backupRequest(ctx context.Context, method, path string, body io.Reader, size int64) (*http.Response, error) {
	cs, err := g.connectionString()
	if err != nil {
		return nil, err
	}
	auth, err := sasToken(cs, time.Now().Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, g.adminURL(path), body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/x-tar")
	}
	req.Header.Set("Authorization", auth)
	return g.httpClient(0).Do(req) // as long as the archive takes; Ctrl-C cancels
}

func (g *globals) apiFailure(what string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return g.unauthorized(what, resp.StatusCode, apiMessage(body))
	case http.StatusUnprocessableEntity:
		return fmt.Errorf("%s: the archive was refused, nothing was restored: %s", what, apiMessage(body))
	case http.StatusConflict:
		return fmt.Errorf("%s: refused: %s", what, apiMessage(body))
	}
	return fmt.Errorf("%s: %s", what, describeAPIError(resp.StatusCode, body, g.adminAddr))
}

func (g *globals) backupCreate(ctx context.Context, file string) error {
	what := "backup create"
	resp, err := g.backupRequest(ctx, http.MethodGet, "/$cluster/backup", nil, 0)
	if err != nil {
		return fmt.Errorf("%s: cannot reach the admin API at %s (--admin-addr): %v", what, g.adminAddr, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return g.apiFailure(what, resp)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".partial-*")
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name()) // gone after the rename
	}()
	bar := &byteProgress{w: g.stderr, on: g.showProgress(), what: "backup"}
	w := bufio.NewWriterSize(tmp, 1<<20)
	man, n, err := readArchive(io.TeeReader(resp.Body, w), bar)
	bar.finish()
	if err != nil {
		return fmt.Errorf("%s: %v; %s was not written", what, err, file)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	o := (&object{}).add("File", file).add("Bytes", n).add("Queues", man.Queues).add("Topics", man.Topics).
		add("Partitions", len(man.Partitions))
	if g.output == "json" {
		return g.printObject(o)
	}
	fmt.Fprintf(g.stdout, "backup written to %s: %d queues, %d topics, %d partitions, %s\n", file, man.Queues, man.Topics,
		len(man.Partitions), mib(n))
	return nil
}

// readArchive reads a whole archive, checking each member's SHA-256 against
// SHA256SUMS, and returns its manifest and size.
func readArchive(r io.Reader, bar *byteProgress) (*backupManifest, int64, error) {
	cr := &countingReader{r: r, p: bar}
	tr := tar.NewReader(cr)
	sums := map[string]string{}
	var order []string
	man := &backupManifest{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, cr.p.n, errors.New("the archive ended without its SHA256SUMS trailer (the backup failed on the server; see its log)")
		}
		if err != nil {
			return nil, cr.p.n, fmt.Errorf("the archive is damaged or cut short: %v", err)
		}
		hash := sha256.New()
		body := io.TeeReader(tr, hash)
		switch h.Name {
		case "manifest.json":
			if err := json.NewDecoder(body).Decode(man); err != nil {
				return nil, cr.p.n, fmt.Errorf("manifest.json: %v", err)
			}
			bar.total, bar.all = man.Bytes, len(man.Partitions)
		case "SHA256SUMS":
			b, err := io.ReadAll(body)
			if err != nil {
				return nil, cr.p.n, fmt.Errorf("the archive is cut short: %v", err)
			}
			listed := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				sum, name, _ := strings.Cut(line, "  ")
				listed[name] = sum
			}
			for _, name := range order {
				if listed[name] != sums[name] {
					return nil, cr.p.n, fmt.Errorf("member %s has SHA-256 %s, SHA256SUMS says %q", name, sums[name], listed[name])
				}
			}
			if len(listed) != len(order) {
				return nil, cr.p.n, fmt.Errorf("SHA256SUMS lists %d members, the archive has %d", len(listed), len(order))
			}
			if _, err := io.Copy(io.Discard, cr); err != nil { // the tar end
				return nil, cr.p.n, err
			}
			if man.Format == "" {
				return nil, cr.p.n, errors.New("the archive has no manifest.json")
			}
			return man, cr.p.n, nil
		}
		if _, err := io.Copy(io.Discard, body); err != nil {
			return nil, cr.p.n, fmt.Errorf("the archive is cut short in %s: %v", h.Name, err)
		}
		if strings.HasPrefix(h.Name, "partitions/") {
			bar.parts++
		}
		sums[h.Name] = hex.EncodeToString(hash.Sum(nil))
		order = append(order, h.Name)
	}
}

func (g *globals) backupRestore(ctx context.Context, file string) error {
	what := "backup restore"
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	bar := &byteProgress{w: g.stderr, on: g.showProgress(), what: "upload", total: st.Size()}
	resp, err := g.backupRequest(ctx, http.MethodPost, "/$cluster/restore", &countingReader{r: f, p: bar}, st.Size())
	bar.finish()
	if err != nil {
		return fmt.Errorf("%s: cannot reach the admin API at %s (--admin-addr): %v", what, g.adminAddr, unwrapURL(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return g.apiFailure(what, resp)
	}
	var res restoreResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res); err != nil {
		return fmt.Errorf("%s: the node at %s answered something that is not the cluster API's JSON: %v", what, g.adminAddr, err)
	}
	o := (&object{}).add("Queues", res.Queues).add("Topics", res.Topics).add("Subscriptions", res.Subscriptions).
		add("Keys", res.Keys).add("Partitions", res.Partitions).add("Bytes", res.Bytes)
	if g.output == "json" {
		return g.printObject(o)
	}
	fmt.Fprintf(g.stdout, "restored %s: %d queues, %d topics, %d subscriptions, %d keys, %d partitions (%s)\n", file,
		res.Queues, res.Topics, res.Subscriptions, res.Keys, res.Partitions, mib(res.Bytes))
	return nil
}
