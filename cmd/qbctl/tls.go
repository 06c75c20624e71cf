package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// nodeTLS decides how qbctl reaches a node whose admin API serves HTTPS (the node runs
// with --tls-cert or --tls-self-signed), and returns nil for plain HTTP. The node is
// trusted through, in order: --tls-ca (QUORUMBUS_TLS_CA), the certificate file the node
// itself serves (QUORUMBUS_TLS_CERT, as in the node's own container), or the development
// CA in <data>/tls/ca.crt. qbctl dials --admin-addr, often an address the certificate
// does not name (0.0.0.0, a pod IP), so it checks the chain, not the host name.
func (g *globals) nodeTLS() (*tls.Config, error) {
	https := g.tlsCA != "" || os.Getenv("QUORUMBUS_TLS_CERT") != "" || truthy(os.Getenv("QUORUMBUS_TLS_SELF_SIGNED"))
	var ep struct {
		AdminURL string `json:"adminURL"`
	}
	if b, err := os.ReadFile(filepath.Join(g.data, "endpoints.json")); err == nil && json.Unmarshal(b, &ep) == nil && ep.AdminURL != "" {
		https = https || strings.HasPrefix(ep.AdminURL, "https://")
	}
	if !https {
		return nil, nil
	}
	var roots []string
	switch {
	case g.tlsCA != "":
		roots = []string{g.tlsCA}
	case os.Getenv("QUORUMBUS_TLS_CERT") != "":
		roots = []string{os.Getenv("QUORUMBUS_TLS_CERT")}
	default:
		roots = []string{filepath.Join(g.data, "tls", "ca.crt")}
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		b, err := os.ReadFile(r)
		if err != nil {
			return nil, fmt.Errorf("the node serves HTTPS; trusting its certificate: %v (pass --tls-ca)", err)
		}
		for len(b) > 0 {
			var blk *pem.Block
			if blk, b = pem.Decode(b); blk == nil {
				break
			}
			if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
				pool.AddCert(c)
			}
		}
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // the chain is checked below, without the host name
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("the node presented no certificate")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, b := range raw {
				c, err := x509.ParseCertificate(b)
				if err != nil {
					return err
				}
				certs[i] = c
			}
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter})
			return err
		},
	}, nil
}

func truthy(v string) bool { return v == "1" || strings.EqualFold(v, "true") }

// adminURL is the URL of path on the node's admin API.
func (g *globals) adminURL(path string) string {
	if g.adminTLS != nil {
		return "https://" + g.adminAddr + path
	}
	return "http://" + g.adminAddr + path
}

// httpClient is an HTTP client for the node's admin API.
func (g *globals) httpClient(timeout time.Duration) *http.Client {
	if g.adminTLS == nil {
		return &http.Client{Timeout: timeout}
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: g.adminTLS}}
}
