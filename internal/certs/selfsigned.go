package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// SelfSignedFiles are the files of the development certificate in a directory.
type SelfSignedFiles struct {
	CA   string // the CA certificate clients trust (ca.crt)
	Cert string // the server certificate, signed by the CA (tls.crt)
	Key  string // its private key (tls.key)
}

// SelfSigned returns the development certificate kept in dir, creating it
// (a CA and a server certificate it signs, ECDSA P-256) when dir has none, so
// that clients that trusted the CA once keep working across restarts. The
// server certificate names localhost, 127.0.0.1, ::1, the host name and hosts.
// now is the start of validity (the caller's clock).
func SelfSigned(dir string, hosts []string, now time.Time) (SelfSignedFiles, error) {
	f := SelfSignedFiles{
		CA:   filepath.Join(dir, "ca.crt"),
		Cert: filepath.Join(dir, "tls.crt"),
		Key:  filepath.Join(dir, "tls.key"),
	}
	if _, err := tls.LoadX509KeyPair(f.Cert, f.Key); err == nil {
		if _, err := os.Stat(f.CA); err == nil {
			return f, nil
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return f, fmt.Errorf("certs: %w", err)
	}
	caKey, caCert, caDER, err := NewCA("Quorumbus development CA", now, rand.Reader)
	if err != nil {
		return f, err
	}
	names := append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("certs: %w", err)
	}
	leafDER, err := Issue(caCert, caKey, &leafKey.PublicKey, "quorumbus", names, now, 10*365*24*time.Hour, rand.Reader)
	if err != nil {
		return f, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		return f, fmt.Errorf("certs: %w", err)
	}
	// The key first and the CA last: a crash in between leaves no ca.crt, so the
	// next start creates all three again.
	for _, w := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{f.Key, "PRIVATE KEY", keyDER, 0o600},
		{f.Cert, "CERTIFICATE", leafDER, 0o644},
		{f.CA, "CERTIFICATE", caDER, 0o644},
	} {
		if err := writePEM(w.path, w.typ, w.der, w.mode); err != nil {
			return f, err
		}
	}
	return f, nil
}

// NewCA creates a self-signed CA certificate whose key is drawn from rnd.
func NewCA(cn string, now time.Time, rnd interface{ Read([]byte) (int, error) }) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rnd)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Quorumbus"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(20 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rnd, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("certs: %w", err)
	}
	return key, cert, der, nil
}

// Issue signs a certificate for pub, usable by servers and clients, naming
// names (DNS names or IP addresses), valid from an hour before now for ttl.
func Issue(ca *x509.Certificate, caKey crypto.Signer, pub crypto.PublicKey, cn string, names []string,
	now time.Time, ttl time.Duration, rnd interface{ Read([]byte) (int, error) }) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Quorumbus"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if n != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rnd, tmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return der, nil
}

// writePEM writes one PEM block to path through a temporary file and a rename.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

// LoadPool reads a PEM file of CA certificates.
func LoadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, errors.New("certs: " + path + ": no PEM certificate found")
	}
	return p, nil
}
