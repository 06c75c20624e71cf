package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// secretDir lays out a directory as a Kubernetes Secret mount does:
// tls.crt -> ..data/tls.crt, ..data -> a timestamped directory. swap points
// ..data at a new directory holding the given files, atomically.
type secretDir struct {
	t   *testing.T
	dir string
	gen int
}

func (s *secretDir) swap(src SelfSignedFiles) {
	s.t.Helper()
	s.gen++
	ts := filepath.Join(s.dir, "..ts"+string(rune('0'+s.gen)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		s.t.Fatal(err)
	}
	for name, from := range map[string]string{"tls.crt": src.Cert, "tls.key": src.Key} {
		b, err := os.ReadFile(from)
		if err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o600); err != nil {
			s.t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "..data")); err != nil {
		s.t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		link := filepath.Join(s.dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				s.t.Fatal(err)
			}
		}
	}
}

func leafOf(t *testing.T, r *Reloader) *x509.Certificate {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

// TestReloaderFollowsSecretSymlinkSwap: after the mount's ..data symlink is
// swapped to a new certificate, the next handshake gets the new certificate;
// a broken key keeps the last good one in use and Err says why.
func TestReloaderFollowsSecretSymlinkSwap(t *testing.T) {
	now := time.Now()
	a, err := SelfSigned(filepath.Join(t.TempDir(), "a"), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := SelfSigned(filepath.Join(t.TempDir(), "b"), nil, now)
	if err != nil {
		t.Fatal(err)
	}
	sd := &secretDir{t: t, dir: t.TempDir()}
	sd.swap(a)
	r, err := NewReloader(filepath.Join(sd.dir, "tls.crt"), filepath.Join(sd.dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	first := leafOf(t, r)
	sd.swap(b)
	second := leafOf(t, r)
	if bytes.Equal(first.Raw, second.Raw) {
		t.Fatal("certificate unchanged after the secret's ..data symlink was swapped")
	}
	if err := r.Err(); err != nil {
		t.Fatalf("Err() = %v after a good swap", err)
	}

	// A key that does not match its certificate is not taken.
	if err := os.WriteFile(filepath.Join(sd.dir, "..data", "tls.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := leafOf(t, r); !bytes.Equal(got.Raw, second.Raw) {
		t.Fatal("a broken key file replaced the certificate in use")
	}
	if r.Err() == nil {
		t.Fatal("Err() = nil with a broken key on disk")
	}
}

// TestSelfSignedIsStable: a second call on the same directory keeps the CA,
// so clients that trust it keep working across restarts.
func TestSelfSignedIsStable(t *testing.T) {
	dir := t.TempDir()
	f1, err := SelfSigned(dir, []string{"quorumbus-0.example"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(f1.CA)
	f2, err := SelfSigned(dir, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(f2.CA)
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("CA changed on the second start")
	}
	pool, err := LoadPool(f2.CA)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(f2.Cert, f2.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, r)
	for _, host := range []string{"localhost", "127.0.0.1", "quorumbus-0.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
}

// handshake runs both ends of a TLS handshake over loopback TCP and returns the
// server's and the client's error.
func handshake(t *testing.T, server, client *tls.Config) (serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	deadline := time.Now().Add(10 * time.Second)
	_ = a.SetDeadline(deadline)
	_ = b.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3: the client certificate is checked when the server reads.
			_, err = s.Read(make([]byte, 1))
		}
		a.Close()
		done <- err
	}()
	c := tls.Client(b, client)
	cerr = c.Handshake()
	if cerr == nil {
		_, _ = c.Write([]byte{1})
	}
	return <-done, cerr
}

// TestClusterTLSFromFilesAndSecret: nodes with certificates from the same CA files, or
// the same secret, complete mutual TLS; a node of another CA or secret is refused by
// the server even when it skips checking the server itself.
func TestClusterTLSFromFilesAndSecret(t *testing.T) {
	now := time.Now()
	ca := func(dir string) SelfSignedFiles {
		f, err := SelfSigned(filepath.Join(t.TempDir(), dir), nil, now)
		if err != nil {
			t.Fatal(err)
		}
		// A cluster CA file holding the CA that signed tls.crt.
		return f
	}
	a, b := ca("a"), ca("b")
	fileA, err := FileClusterTLS(a.Cert, a.Key, a.CA)
	if err != nil {
		t.Fatal(err)
	}
	fileB, err := FileClusterTLS(b.Cert, b.Key, b.CA)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := SecretClusterTLS([]byte("0123456789abcdef-one"), "n1", now)
	if err != nil {
		t.Fatal(err)
	}
	sec1b, err := SecretClusterTLS([]byte("0123456789abcdef-one"), "n2", now)
	if err != nil {
		t.Fatal(err)
	}
	sec2, err := SecretClusterTLS([]byte("0123456789abcdef-two"), "n3", now)
	if err != nil {
		t.Fatal(err)
	}
	lenient := func(c *tls.Config) *tls.Config {
		c = c.Clone()
		c.VerifyPeerCertificate = nil // accepts any server
		return c
	}
	for _, tc := range []struct {
		name           string
		server, client *tls.Config
		ok             bool
	}{
		{"same CA files", fileA, fileA, true},
		{"same secret", sec1, sec1b, true},
		{"other CA file", fileA, lenient(fileB), false},
		{"other secret", sec1, lenient(sec2), false},
		{"no client certificate", sec1, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, false},
	} {
		serr, cerr := handshake(t, tc.server, tc.client)
		if tc.ok && (serr != nil || cerr != nil) {
			t.Errorf("%s: server %v, client %v; want a handshake", tc.name, serr, cerr)
		}
		if !tc.ok && serr == nil {
			t.Errorf("%s: the server accepted the client", tc.name)
		}
	}
	if _, err := SecretClusterTLS([]byte("short"), "n1", now); err == nil {
		t.Error("a 5-byte secret was accepted")
	}
}

// TestSecretRotationStates: the configurations a cluster passes through while its secret
// changes from A to B (docs/security.md § Rotation) complete mutual TLS, in both roles,
// with the configuration of the step before and after; A and B alone do not, nor does
// a node that skips the first step (B current, A accepted) with one that has only A.
func TestSecretRotationStates(t *testing.T) {
	now := time.Now()
	a, b := []byte("the old cluster secret, A"), []byte("the new cluster secret, B")
	cfg := func(id string, secret []byte, accepted ...[]byte) *tls.Config {
		c, err := SecretClusterTLS(secret, id, now, accepted...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	states := map[string]*tls.Config{
		"A":       cfg("n1", a),
		"A+accB":  cfg("n2", a, b),
		"B+accA":  cfg("n3", b, a),
		"B":       cfg("n4", b),
		"B+accB":  cfg("n5", b, b), // a listed secret equal to the current one is harmless
		"A+accAB": cfg("n6", a, a, b),
	}
	for _, tc := range []struct {
		x, y string
		ok   bool
	}{
		{"A", "A+accB", true},       // step 1: install B
		{"A+accB", "B+accA", true},  // step 2: use B
		{"B+accA", "B", true},       // step 3: drop A
		{"A+accB", "A+accB", true},  // between the steps
		{"B+accA", "B+accA", true},  // between the steps
		{"B", "B+accB", true},       // duplicates
		{"A+accAB", "B+accA", true}, // duplicates
		{"A", "B", false},           // the end: A alone is out
		{"A", "B+accA", false},      // step 1 skipped
		{"A+accB", "B", false},      // step 2 skipped
	} {
		for _, dir := range [][2]string{{tc.x, tc.y}, {tc.y, tc.x}} {
			serr, cerr := handshake(t, states[dir[0]], states[dir[1]])
			if tc.ok && (serr != nil || cerr != nil) {
				t.Errorf("server %s, client %s: server %v, client %v; want a handshake", dir[0], dir[1], serr, cerr)
			}
			if !tc.ok && serr == nil && cerr == nil {
				t.Errorf("server %s, client %s: handshake completed; want it refused", dir[0], dir[1])
			}
		}
	}
	if _, err := SecretClusterTLS(a, "n1", now, []byte("short")); err == nil {
		t.Error("a 5-byte accepted secret was accepted")
	}
}
