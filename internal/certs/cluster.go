package certs

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"
)

// Cluster credentials (docs/security.md § Cluster traffic).
//
// Nodes authenticate each other with mutual TLS: each presents a certificate signed by
// the cluster CA and accepts only peers whose certificate chains to it. Host names are
// not checked (a node is dialled by whatever address gossip learnt), so holding a
// certificate from the cluster CA is what makes a process a member.
//
// With a shared secret, the CA is derived from it: an Ed25519 key whose seed is
// HKDF-SHA256(secret), in a certificate whose every field is fixed, so every node that
// knows the secret builds the same CA, and each issues itself a fresh leaf certificate
// at start. No file has to be distributed, and a process with another secret has
// another CA, so its handshakes fail both ways. The same secret keys memberlist's
// encryption (GossipKey), which covers gossip's UDP packets that do not go through TLS.
// This is mutual TLS rather than an HMAC challenge on the mux because TLS also encrypts
// the streams and the standard library does all of it.

// MinSecretLen is the shortest cluster secret accepted (bytes).
const MinSecretLen = 16

// hkdfSalt separates Quorumbus's derivations from any other use of the same secret;
// "v1" lets a later release derive new keys without colliding.
var hkdfSalt = []byte("quorumbus cluster v1")

func derive(secret []byte, info string, n int) ([]byte, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("certs: cluster secret must be at least %d bytes, got %d", MinSecretLen, len(secret))
	}
	return hkdf.Key(sha256.New, secret, hkdfSalt, info, n)
}

// GossipKey is the 32-byte memberlist key (AES-256-GCM) derived from the cluster secret.
func GossipKey(secret []byte) ([]byte, error) {
	return derive(secret, "quorumbus gossip key", 32)
}

// ClusterCA is the CA derived from the cluster secret: the same certificate and key on
// every node that knows the secret.
func ClusterCA(secret []byte) (ed25519.PrivateKey, *x509.Certificate, error) {
	seed, err := derive(secret, "quorumbus cluster CA", ed25519.SeedSize)
	if err != nil {
		return nil, nil, err
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Quorumbus cluster CA (derived)", Organization: []string{"Quorumbus"}},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	// Ed25519 signatures are deterministic: the certificate is the same bytes everywhere.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	return key, cert, nil
}

// SecretClusterTLS is the mutual-TLS configuration of a node that knows the secret: a
// leaf certificate for nodeID, freshly issued by the derived CA, and the derived CA as
// a root. Each accepted secret adds its derived CA as a root too, never as the issuer
// of what the node presents: during a rotation (docs/security.md § Rotation) a node
// accepts peers of the secret being introduced or retired while it still presents,
// and so is accepted with, the one every peer knows.
func SecretClusterTLS(secret []byte, nodeID string, now time.Time, accepted ...[]byte) (*tls.Config, error) {
	caKey, ca, err := ClusterCA(secret)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for i, a := range accepted {
		_, other, err := ClusterCA(a)
		if err != nil {
			return nil, fmt.Errorf("certs: accepted cluster secret %d: %w", i+1, err)
		}
		pool.AddCert(other)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	der, err := Issue(ca, caKey, &key.PublicKey, nodeID, nil, now, 100*365*24*time.Hour, rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	cert := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	get := func() (*tls.Certificate, error) { return cert, nil }
	return clusterConfig(get, func() (*x509.CertPool, error) { return pool, nil }), nil
}

// FileClusterTLS is the mutual-TLS configuration from files: this node's certificate
// and key (reloaded when they change) and the CA bundle peers must chain to (also
// reloaded, so a CA can be rotated by first adding the new CA to the bundle).
func FileClusterTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	r, err := NewReloader(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	roots := &poolReloader{path: caFile}
	if _, err := roots.current(); err != nil {
		return nil, err
	}
	return clusterConfig(func() (*tls.Certificate, error) { return r.current() }, roots.current), nil
}

// clusterConfig serves both ends of a cluster connection: the server asks for and
// verifies the client's certificate, the client verifies the server's, each against
// roots and without a host name.
func clusterConfig(cert func() (*tls.Certificate, error), roots func() (*x509.CertPool, error)) *tls.Config {
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("certs: the peer presented no certificate")
		}
		pool, err := roots()
		if err != nil {
			return err
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, b := range raw {
			if certs[i], err = x509.ParseCertificate(b); err != nil {
				return fmt.Errorf("certs: peer certificate: %w", err)
			}
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err = certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("certs: peer is not a cluster member: %w", err)
		}
		return nil
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS13, // only Quorumbus nodes speak on this port
		GetCertificate:       func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert() },
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert() },
		ClientAuth:           tls.RequireAnyClientCert, // verified by VerifyPeerCertificate
		// Peers are dialled by gossiped addresses, not names their certificates carry:
		// the chain is verified in VerifyPeerCertificate instead of by host name.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: verify,
	}
}

// poolReloader is a CA bundle file reloaded when it changes.
type poolReloader struct {
	path  string
	mu    sync.Mutex
	state fileState
	pool  *x509.CertPool
}

func (p *poolReloader) current() (*x509.CertPool, error) {
	st, err := stat(p.path)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && st.same(p.state) && p.pool != nil {
		return p.pool, nil
	}
	if err == nil {
		var pool *x509.CertPool
		if pool, err = LoadPool(p.path); err == nil {
			p.pool, p.state = pool, st
			return pool, nil
		}
	}
	if p.pool != nil {
		return p.pool, nil // keep the last good bundle
	}
	return nil, err
}

// ReadSecret is a cluster secret given as a value or, prefixed with "@", a file path
// (a mounted Kubernetes Secret); surrounding white space is dropped.
func ReadSecret(v string) ([]byte, error) {
	if len(v) > 0 && v[0] == '@' {
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return nil, fmt.Errorf("certs: cluster secret: %w", err)
		}
		v = string(b)
	}
	for len(v) > 0 && (v[len(v)-1] == '\n' || v[len(v)-1] == '\r' || v[len(v)-1] == ' ') {
		v = v[:len(v)-1]
	}
	if len(v) < MinSecretLen {
		return nil, fmt.Errorf("certs: cluster secret must be at least %d bytes, got %d", MinSecretLen, len(v))
	}
	return []byte(v), nil
}
