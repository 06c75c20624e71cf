package certs

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// MinVersion is the lowest TLS version any Quorumbus listener accepts.
const MinVersion = tls.VersionTLS12

// fileState identifies one version of a file: a replaced file (new inode through
// a rename or a symlink swap) or a rewritten one (size, mtime) differs.
type fileState struct {
	info os.FileInfo
}

func (a fileState) same(b fileState) bool {
	if a.info == nil || b.info == nil {
		return false
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// Reloader serves the certificate in a certificate file and a key file (PEM),
// reloading them when either changes on disk. When the new pair does not load
// (a half-written file, a key that does not match yet) the last good
// certificate stays in use and Err reports why, until a good pair appears.
type Reloader struct {
	certFile, keyFile string

	mu        sync.Mutex // guards the fields below
	cert      *tls.Certificate
	certState fileState
	keyState  fileState
	err       error // last reload failure; nil once a pair loaded
}

// NewReloader loads the pair once and fails if it does not load.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return r, nil
}

// current returns the certificate, reloading it first if the files changed.
func (r *Reloader) current() (*tls.Certificate, error) {
	cs, cerr := stat(r.certFile)
	ks, kerr := stat(r.keyFile)
	r.mu.Lock()
	defer r.mu.Unlock()
	if cerr == nil && kerr == nil && cs.same(r.certState) && ks.same(r.keyState) && r.cert != nil {
		return r.cert, nil
	}
	err := errors.Join(cerr, kerr)
	if err == nil {
		var c tls.Certificate
		c, err = tls.LoadX509KeyPair(r.certFile, r.keyFile)
		if err == nil {
			r.cert, r.certState, r.keyState, r.err = &c, cs, ks, nil
			return r.cert, nil
		}
		err = fmt.Errorf("certs: load %s, %s: %w", r.certFile, r.keyFile, err)
	}
	r.err = err
	if r.cert != nil {
		return r.cert, nil // keep serving the last good pair
	}
	return nil, err
}

func stat(path string) (fileState, error) {
	fi, err := os.Stat(path) // follows symlinks: a swapped ..data link is a new file
	if err != nil {
		return fileState{}, fmt.Errorf("certs: %w", err)
	}
	return fileState{info: fi}, nil
}

// GetCertificate is a tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current()
}

// GetClientCertificate is a tls.Config.GetClientCertificate (mutual TLS).
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.current()
}

// Err reports why the files on disk are not the certificate in use, or nil.
func (r *Reloader) Err() error {
	_, _ = r.current()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// NotAfter is the expiry of the certificate in use (zero if unknown).
func (r *Reloader) NotAfter() time.Time {
	c, err := r.current()
	if err != nil || c.Leaf == nil {
		return time.Time{}
	}
	return c.Leaf.NotAfter
}

// ServerConfig is the TLS configuration of a listener presenting r's certificate.
func ServerConfig(r *Reloader) *tls.Config {
	return &tls.Config{MinVersion: MinVersion, GetCertificate: r.GetCertificate}
}
