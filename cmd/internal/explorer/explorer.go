package explorer

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// Config configures the explorer (P10).
type Config struct {
	// AMQPAddr is the node's AMQP listener (host:port); a wildcard host means loopback.
	// Required unless Dial is set.
	AMQPAddr string
	// Dial, when set, opens a connection straight to the node's AMQP server (cmd hands
	// one end of an in-process pipe to amqp.Server.ServeConn), and the explorer's SDK
	// clients use it instead of AMQPAddr: it works whichever listeners the node has
	// (plain AMQP may be off with TLS on) and costs no TLS handshake.
	Dial func(ctx context.Context) (net.Conn, error)
	// Authorize checks a /$ui/api/ request's SAS token; nil error means allowed.
	// Required (cmd passes admin.Handler.Authorize).
	Authorize func(*http.Request) error
	// Next serves every request that is not the explorer's: the admin API. Required.
	Next http.Handler
	// Sessions lists sessions and reads their state for the session list; nil answers
	// /$ui/api/sessions with 501.
	Sessions Sessions
	// Metrics gathers every node's metrics for the rates and health view; nil answers
	// /$ui/api/stats with 501.
	Metrics Metrics
	// Now is the clock the stats are stamped with; nil means time.Now.
	Now func() time.Time
	// Logger receives request errors; nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes bounds /$ui/api/ request bodies (a test message body included).
	MaxBodyBytes int64
	// ReceiveRoundTimeout bounds one receive round of a resubmit; a round that
	// gets nothing within it ends the operation.
	ReceiveRoundTimeout time.Duration
}

// Sessions is what the session list needs from the node (P9: the consumer owns it).
// Errors wrapping ErrNotFound answer 404.
type Sessions interface {
	// ListSessions lists the sessions of a queue or subscription that have messages or
	// state, sorted.
	ListSessions(ctx context.Context, t Target) ([]string, error)
	// SessionState returns a session's state, nil when it has none. It reads the
	// state as an operator does, without taking the session's lock (which AMQP
	// clients need), so a consumer holding the session is not disturbed.
	SessionState(ctx context.Context, t Target, sessionID string) ([]byte, error)
}

// ErrNotFound marks a Sessions error for a missing entity or session.
var ErrNotFound = errors.New("explorer: not found")

// DefaultConfig returns the defaults; AMQPAddr or Dial, Authorize and Next must still be set.
func DefaultConfig() *Config {
	return &Config{MaxBodyBytes: 1 << 20, ReceiveRoundTimeout: 3 * time.Second}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.AMQPAddr == "" && c.Dial == nil:
		return errors.New("explorer: Config.AMQPAddr or Config.Dial is required")
	case c.Authorize == nil:
		return errors.New("explorer: Config.Authorize is required")
	case c.Next == nil:
		return errors.New("explorer: Config.Next is required")
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("explorer: Config.MaxBodyBytes %d is below 1024", c.MaxBodyBytes)
	case c.ReceiveRoundTimeout <= 0:
		return fmt.Errorf("explorer: Config.ReceiveRoundTimeout %v is not positive", c.ReceiveRoundTimeout)
	}
	return nil
}

func (c *Config) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// Handler serves the UI and hands everything else to Config.Next. Create it with New.
type Handler struct {
	cfg    Config // immutable after New
	log    *slog.Logger
	static http.Handler
}

var _ http.Handler = (*Handler)(nil)

// New returns a handler for cfg.
func New(cfg *Config) (*Handler, error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	c := *cfg
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if host, port, err := net.SplitHostPort(c.AMQPAddr); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			c.AMQPAddr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	return &Handler{cfg: c, log: log, static: http.StripPrefix(prefix, http.FileServer(http.FS(sub)))}, nil
}

// prefix starts every path of the explorer but its page at "/".
const (
	prefix    = "/$ui/"
	apiPrefix = prefix + "api/"
)

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		// The admin API has nothing at "/" (it answers 404: no entity in the path).
		h.page(w, r)
	case strings.HasPrefix(p, apiPrefix):
		h.api(w, r)
	case strings.HasPrefix(p, prefix) && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		h.headers(w)
		h.static.ServeHTTP(w, r)
	default:
		h.cfg.Next.ServeHTTP(w, r)
	}
}

// headers keeps the page to its own origin's assets: nothing is loaded from elsewhere,
// and nothing inline runs.
func (h *Handler) headers(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	b, err := assets.ReadFile("assets/index.html")
	if err != nil { // cannot happen: the file is embedded
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h.headers(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}

// apiError is the body of every /$ui/api/ error.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// httpError is an error with the status code to answer.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := statusOf(err)
	if code >= 500 {
		h.log.Error("explorer: request failed", "path", r.URL.Path, "code", code, "err", err)
	} else {
		h.log.Info("explorer: request rejected", "path", r.URL.Path, "code", code, "err", err)
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "SharedAccessSignature")
	}
	writeJSON(w, code, apiError{Code: code, Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
