package kubenode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ZoneLabel is the well-known label of a node's zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// ServiceAccountDir is where Kubernetes mounts a pod's service account token, the
// cluster's CA and the namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

var (
	// ErrNotInCluster: no API server address in the environment.
	ErrNotInCluster = errors.New("kubenode: not in a Kubernetes pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT unset)")
	// ErrRetryable marks failures that may pass on a later try: the API server not
	// reachable, or answering 429 or 5xx. Refusals (401, 403, 404) are not.
	ErrRetryable = errors.New("kubenode: retryable")
)

// Config says where the API server is and how to authenticate to it (P10).
type Config struct {
	// Server is the API server's base URL, https://HOST:PORT.
	Server string
	// TokenFile holds the bearer token; read on every call, since the kubelet renews
	// a projected token.
	TokenFile string
	// CAFile holds the PEM CA certificates the API server's certificate must chain to.
	CAFile string
	// Timeout bounds one request.
	Timeout time.Duration
}

// InCluster is the Config of a pod: the API server from the environment the kubelet
// sets (getenv is os.Getenv), the token and CA from ServiceAccountDir.
func InCluster(getenv func(string) string) (Config, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return Config{}, ErrNotInCluster
	}
	return Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		TokenFile: filepath.Join(ServiceAccountDir, "token"),
		CAFile:    filepath.Join(ServiceAccountDir, "ca.crt"),
		Timeout:   10 * time.Second,
	}, nil
}

// Validate checks the configuration.
func (c Config) Validate() error {
	u, err := url.Parse(c.Server)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("kubenode: Server %q: want https://HOST:PORT", c.Server)
	case c.TokenFile == "" || c.CAFile == "":
		return errors.New("kubenode: TokenFile and CAFile are required")
	case c.Timeout <= 0:
		return fmt.Errorf("kubenode: Timeout %v is not positive", c.Timeout)
	}
	return nil
}

// Label returns the value of label on the Kubernetes node named node, and whether the
// node has it.
func Label(ctx context.Context, c Config, node, label string) (value string, ok bool, err error) {
	if err := c.Validate(); err != nil {
		return "", false, err
	}
	if node == "" || strings.ContainsAny(node, "/?#%") {
		return "", false, fmt.Errorf("kubenode: node name %q is not one", node)
	}
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", false, fmt.Errorf("kubenode: the service account token: %w (is it mounted?)", err)
	}
	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		return "", false, fmt.Errorf("kubenode: the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return "", false, fmt.Errorf("kubenode: %s holds no PEM certificate", c.CAFile)
	}
	client := &http.Client{
		Timeout:   c.Timeout,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Proxy: nil},
	}
	defer client.CloseIdleConnections()
	u := strings.TrimSuffix(c.Server, "/") + "/api/v1/nodes/" + url.PathEscape(node)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false, fmt.Errorf("kubenode: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", false, fmt.Errorf("kubenode: GET node %s: %w (%w)", node, err, ErrRetryable)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", false, fmt.Errorf("kubenode: GET node %s: %w (%w)", node, err, ErrRetryable)
	}
	if resp.StatusCode != http.StatusOK {
		// The API server answers errors with a Status object; its message says why.
		var st struct{ Message string }
		_ = json.Unmarshal(body, &st)
		msg := st.Message
		if msg == "" {
			msg = strings.TrimSpace(string(body))
		}
		err := fmt.Errorf("kubenode: GET node %s: %s: %s", node, resp.Status, msg)
		switch {
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return "", false, fmt.Errorf("%w (the pod's service account needs get on nodes: a ClusterRole bound to it)", err)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			return "", false, fmt.Errorf("%w (%w)", err, ErrRetryable)
		}
		return "", false, err
	}
	var n struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return "", false, fmt.Errorf("kubenode: node %s: %w", node, err)
	}
	value, ok = n.Metadata.Labels[label]
	return value, ok, nil
}
