package admin

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cluster/meta"
	"github.com/quorumbus/quorumbus/fsm/rule"
)

// Config configures the admin API handler (P10).
type Config struct {
	// Store reads and changes the metadata. Required.
	Store Store
	// Ready reports whether the node can serve (GET /readyz, and the official
	// emulator's GET /health); nil means always ready.
	Ready func() error
	// Metrics, when set, serves GET /metrics (the Prometheus exposition).
	Metrics http.Handler
	// Debug, when set, serves everything under /debug/pprof/ (cmd/quorumbus --pprof).
	Debug http.Handler
	// Now is the clock for token expiry and error timestamps; nil means time.Now.
	Now func() time.Time
	// Logger receives request errors; nil discards them.
	Logger *slog.Logger
	// PartitionCount is how many partitions an entity created with
	// EnablePartitioning=true gets (Service Bus uses 16).
	PartitionCount int32
	// MaxBodyBytes bounds PUT bodies.
	MaxBodyBytes int64
	// DefaultPageSize is the list page size when the request has no $top.
	DefaultPageSize int
	// SKU is reported by GET /$namespaceinfo.
	SKU string
	// Cluster serves the /$cluster/ operator API (clusterapi.go); nil answers it with 404.
	Cluster Cluster
}

// DefaultConfig returns the defaults; Store must still be set.
func DefaultConfig() *Config {
	return &Config{PartitionCount: meta.DefaultPartitionCount, MaxBodyBytes: 1 << 20, DefaultPageSize: 100, SKU: "Standard"}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("admin: Config.Store is required")
	case c.PartitionCount < 1 || c.PartitionCount > meta.MaxPartitionCount:
		return fmt.Errorf("admin: Config.PartitionCount %d is outside 1..%d", c.PartitionCount, meta.MaxPartitionCount)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("admin: Config.MaxBodyBytes %d is below 1024", c.MaxBodyBytes)
	case c.DefaultPageSize < 1:
		return fmt.Errorf("admin: Config.DefaultPageSize %d is below 1", c.DefaultPageSize)
	}
	return nil
}

// Handler serves the admin API. Create it with New.
type Handler struct {
	cfg Config // immutable after New
	log *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

// New returns a handler for cfg (nil means DefaultConfig, which lacks a Store).
func New(cfg *Config) (*Handler, error) {
	if cfg == nil {
		cfg = DefaultConfig()
	}
	c := *cfg
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SKU == "" {
		c.SKU = "Standard"
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: c, log: log}, nil
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

// route is a parsed request path.
type route struct {
	kind   routeKind
	entity string // queue or topic name (as written in the path)
	sub    string
	rule   string
}

type routeKind uint8

const (
	routeEntity routeKind = iota + 1
	routeNamespace
	routeListQueues
	routeListTopics
	routeListSubs
	routeSub
	routeListRules
	routeRule
	routeKeys     // Quorumbus's own: the namespace's shared access keys (/$keys, /$keys/NAME)
	routePurge    // Quorumbus's own: POST /$purge, /Q/$purge, /T/$purge, /T/Subscriptions/S/$purge
	routeEntities // Quorumbus's own: DELETE /$entities?prefix=P
	routeConfig   // Quorumbus's own: PUT /$config (a Config.json to converge to)
)

func parseRoute(path string) (route, error) {
	p := strings.Trim(path, "/")
	if strings.EqualFold(p, "$purge") || strings.EqualFold(p, "$namespaceinfo/$purge") {
		return route{kind: routePurge}, nil
	}
	if i := strings.LastIndexByte(p, '/'); i > 0 && strings.EqualFold(p[i+1:], "$purge") {
		r, err := parseRoute(p[:i])
		if err != nil || (r.kind != routeEntity && r.kind != routeSub) {
			return route{}, errorf(http.StatusNotFound, "unknown path %q: $purge follows a queue, topic or subscription", path)
		}
		r.kind = routePurge
		return r, nil
	}
	switch {
	case p == "":
		return route{}, errorf(http.StatusNotFound, "no entity in the request path")
	case strings.EqualFold(p, "$namespaceinfo"):
		return route{kind: routeNamespace}, nil
	case strings.EqualFold(p, "$Resources/Queues"):
		return route{kind: routeListQueues}, nil
	case strings.EqualFold(p, "$Resources/Topics"):
		return route{kind: routeListTopics}, nil
	case strings.EqualFold(p, "$keys"):
		return route{kind: routeKeys}, nil
	case strings.EqualFold(p, "$entities"):
		return route{kind: routeEntities}, nil
	case strings.EqualFold(p, "$config"):
		return route{kind: routeConfig}, nil
	case len(p) > 6 && strings.EqualFold(p[:6], "$keys/") && !strings.Contains(p[6:], "/"):
		return route{kind: routeKeys, rule: p[6:]}, nil
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, s := range segs {
		if !strings.EqualFold(s, "Subscriptions") {
			continue
		}
		if i == 0 {
			break
		}
		r := route{entity: strings.Join(segs[:i], "/")}
		rest := segs[i+1:]
		if len(rest) > 0 && rest[len(rest)-1] == "" {
			rest = rest[:len(rest)-1] // trailing slash
		}
		switch {
		case len(rest) == 0:
			r.kind = routeListSubs
		case len(rest) == 1:
			r.kind, r.sub = routeSub, rest[0]
		case len(rest) == 2 && strings.EqualFold(rest[1], "Rules"):
			r.kind, r.sub = routeListRules, rest[0]
		case len(rest) == 3 && strings.EqualFold(rest[1], "Rules"):
			r.kind, r.sub, r.rule = routeRule, rest[0], rest[2]
		default:
			return route{}, errorf(http.StatusNotFound, "unknown path %q", path)
		}
		return r, nil
	}
	return route{kind: routeEntity, entity: p}, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Health, metrics and debug endpoints answer whether or not the request carries an
	// Authorization header (a scraper or probe may send credentials everywhere). A
	// management API request always names its api-version (the SDKs and qbctl add it),
	// so with one the path is an entity's: a queue named "healthz" or "metrics" stays
	// reachable through the management API.
	if r.Method == http.MethodGet && !r.URL.Query().Has("api-version") {
		if h.cfg.Debug != nil && strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			h.cfg.Debug.ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case "/metrics":
			if h.cfg.Metrics != nil {
				h.cfg.Metrics.ServeHTTP(w, r)
				return
			}
		case "/healthz":
			writeHealth(w, nil)
			return
		case "/health":
			// The official emulator's health check (HealthCheckApiSchema.md): 200 when
			// the broker can serve, else 503 with its fixed message; the reason is logged.
			var err error
			if h.cfg.Ready != nil {
				err = h.cfg.Ready()
			}
			if err != nil {
				h.log.Info("admin: /health: not ready", "err", err)
			}
			writeEmulatorHealth(w, err == nil)
			return
		case "/readyz":
			var err error
			if h.cfg.Ready != nil {
				err = h.cfg.Ready()
			}
			writeHealth(w, err)
			return
		}
	}
	if h.serveCluster(w, r) {
		return
	}
	rt, err := parseRoute(r.URL.Path)
	if err == nil {
		err = h.serve(w, r, rt)
	}
	if err != nil {
		h.writeError(w, r, rt, err)
	}
}

// writeEmulatorHealth answers as the official emulator's /health does.
func writeEmulatorHealth(w http.ResponseWriter, healthy bool) {
	w.Header().Set("Content-Type", "application/json")
	body := map[string]string{"status": "healthy", "message": "Service is healthy."}
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
		body = map[string]string{"status": "unhealthy", "message": "Service not available. Please try after some time."}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func writeHealth(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	body := map[string]string{"status": "healthy", "message": "Service is healthy."}
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		body = map[string]string{"status": "unhealthy", "message": "Service not available: " + err.Error()}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rt route) error {
	ctx := r.Context()
	switch {
	case rt.kind == routePurge && r.Method != http.MethodPost:
		return errorf(http.StatusMethodNotAllowed, "%s needs POST", r.URL.Path)
	case rt.kind == routePurge:
	case rt.kind == routeEntities && r.Method != http.MethodDelete:
		return errorf(http.StatusMethodNotAllowed, "%s needs DELETE", r.URL.Path)
	case r.Method == http.MethodGet, r.Method == http.MethodPut, r.Method == http.MethodDelete:
	default:
		return errorf(http.StatusMethodNotAllowed, "method %s is not supported", r.Method)
	}
	var exists bool
	authErr, err := h.readAuthorized(ctx, func(s *meta.State) error {
		exists = rt.kind != routeEntity || s.Kind(rt.entity) != meta.KindNone
		return authorize(r.Header.Get("Authorization"), h.cfg.Now(), s, r.URL.Path, rt.entity)
	})
	if err != nil {
		return err
	}
	switch {
	case errors.Is(authErr, errNoManage) && r.Method == http.MethodGet && !exists:
		// Service Bus answers a GET of a missing entity as not found even without Manage.
	case errors.Is(authErr, errNoManage):
		return &httpError{code: http.StatusUnauthorized, msg: noManageText(r.Method, rt, r.Host)}
	case authErr != nil:
		return &httpError{code: http.StatusUnauthorized, msg: authErr.Error()}
	}
	switch rt.kind {
	case routeKeys:
		return h.keys(ctx, w, r, rt)
	case routePurge:
		return h.purge(ctx, w, r, rt)
	case routeEntities:
		return h.deletePrefixed(ctx, w, r)
	case routeConfig:
		return h.applyConfig(ctx, w, r)
	}
	switch r.Method {
	case http.MethodGet:
		return h.get(ctx, w, r, rt)
	case http.MethodPut:
		if rt.kind == routeNamespace || rt.kind == routeListQueues || rt.kind == routeListTopics ||
			rt.kind == routeListSubs || rt.kind == routeListRules {
			return errorf(http.StatusMethodNotAllowed, "PUT is not supported on %s", r.URL.Path)
		}
		return h.put(ctx, w, r, rt)
	default:
		return h.delete(ctx, w, r, rt)
	}
}

// noManageText is Service Bus's wording for a key without the Manage right, per
// operation; SDK tests match it.
func noManageText(method string, rt route, host string) string {
	switch rt.kind {
	case routeSub, routeListSubs, routeRule, routeListRules:
		op := map[string]string{http.MethodGet: "GetSubscription", http.MethodPut: "CreateOrUpdateSubscription",
			http.MethodDelete: "DeleteSubscription"}[method]
		if rt.kind != routeSub && method == http.MethodGet {
			op = "EnumerateSubscriptions"
		}
		return fmt.Sprintf("401 SubCode=40100: Unauthorized : Unauthorized access for '%s' operation on endpoint 'sb://%s/%s'", op, host, rt.entity)
	}
	switch method {
	case http.MethodPut:
		return "Authorization failed for specified action: Manage,EntityWrite"
	case http.MethodDelete:
		return "Authorization failed for specified action: Manage,EntityDelete."
	}
	return "Manage,EntityRead claims required for this operation"
}

// ---- GET

type page struct{ skip, top int }

func (h *Handler) page(r *http.Request) (page, error) {
	q := r.URL.Query()
	p := page{top: h.cfg.DefaultPageSize}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"$skip", &p.skip}, {"$top", &p.top}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return p, errorf(http.StatusBadRequest, "%s=%q is not a non-negative integer", f.name, v)
			}
			*f.dst = n
		}
	}
	return p, nil
}

func window[T any](xs []T, p page) []T {
	if p.skip >= len(xs) {
		return nil
	}
	xs = xs[p.skip:]
	if p.top < len(xs) {
		xs = xs[:p.top]
	}
	return xs
}

// snapshot is what a GET needs from the metadata, copied out under Store.Read.
type snapshot struct {
	ns     meta.Namespace
	kind   meta.EntityKind
	queue  meta.Queue
	topic  meta.Topic
	subs   []meta.Subscription
	queues []meta.Queue
	topics []meta.Topic
	tsubs  map[string][]meta.Subscription // topic name -> subscriptions, for topic lists
}

func (h *Handler) read(ctx context.Context, rt route) (*snapshot, error) {
	var sn snapshot
	err := h.cfg.Store.Read(ctx, func(s *meta.State) {
		sn.ns = s.Namespace()
		switch rt.kind {
		case routeListQueues:
			sn.queues = s.Queues()
		case routeListTopics:
			sn.topics = s.Topics()
			sn.tsubs = map[string][]meta.Subscription{}
			for _, t := range sn.topics {
				sn.tsubs[t.Name], _ = s.Subscriptions(t.Name)
			}
		case routeNamespace:
		default:
			sn.kind = s.Kind(rt.entity)
			switch sn.kind {
			case meta.KindQueue:
				sn.queue, _ = s.Queue(rt.entity)
			case meta.KindTopic:
				sn.topic, _ = s.Topic(rt.entity)
				sn.subs, _ = s.Subscriptions(rt.entity)
			}
		}
	})
	return &sn, err
}

// runtime reads an entity's counts. When they cannot be read (a partition without a
// leader yet), the response is a 503 rather than counts of zero, which a client would
// take for the truth; x records the error for the caller to answer with.
func (h *Handler) runtime(ctx context.Context, x *xmlWriter, e Entity) RuntimeCounts {
	if x.created {
		return RuntimeCounts{}
	}
	c, err := h.cfg.Store.Runtime(ctx, e)
	if err != nil {
		h.log.Warn("admin: runtime counts unavailable", "entity", e.Name, "subscription", e.Subscription, "err", err)
		if x.err == nil {
			x.err = errorf(http.StatusServiceUnavailable, "the runtime properties of %q are unavailable: %v", e.Name, err)
		}
		return RuntimeCounts{}
	}
	return c
}

func notFoundErr(what string) error {
	return fmt.Errorf("%s: %w", what, meta.ErrNotFound)
}

func (h *Handler) get(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) error {
	sn, err := h.read(ctx, rt)
	if err != nil {
		return err
	}
	x := &xmlWriter{}
	switch rt.kind {
	case routeNamespace:
		h.entryStart(x, r, "$namespaceinfo", sn.ns.Name, sn.ns.CreatedAt, sn.ns.UpdatedAt, sn.ns.Name)
		x.raw(`<NamespaceInfo` + descAttrs + `>`)
		x.el("CreatedTime", atomTime(sn.ns.CreatedAt))
		x.el("MessagingSKU", h.cfg.SKU)
		x.el("ModifiedTime", atomTime(sn.ns.UpdatedAt))
		x.el("Name", sn.ns.Name)
		x.el("NamespaceType", "Messaging")
		x.raw(`</NamespaceInfo>`)
		h.entryEnd(x)
	case routeEntity:
		switch sn.kind {
		case meta.KindQueue:
			h.queueEntry(ctx, x, r, sn.ns.Name, sn.queue)
		case meta.KindTopic:
			h.topicEntry(ctx, x, r, sn.ns.Name, sn.topic, sn.subs)
		default:
			return notFoundErr(fmt.Sprintf("the messaging entity %q", rt.entity))
		}
	case routeListQueues, routeListTopics:
		p, err := h.page(r)
		if err != nil {
			return err
		}
		title := "Queues"
		if rt.kind == routeListTopics {
			title = "Topics"
		}
		h.feedStart(x, r, title)
		if rt.kind == routeListQueues {
			for _, q := range window(sn.queues, p) {
				h.queueEntry(ctx, x, r, sn.ns.Name, q)
			}
		} else {
			for _, t := range window(sn.topics, p) {
				h.topicEntry(ctx, x, r, sn.ns.Name, t, sn.tsubs[t.Name])
			}
		}
		x.raw(`</feed>`)
	case routeListSubs, routeSub, routeListRules, routeRule:
		if sn.kind != meta.KindTopic {
			return notFoundErr(fmt.Sprintf("the topic %q", rt.entity))
		}
		if rt.kind == routeListSubs {
			p, err := h.page(r)
			if err != nil {
				return err
			}
			h.feedStart(x, r, "Subscriptions")
			for _, s := range window(sn.subs, p) {
				h.subEntry(ctx, x, r, sn.ns.Name, s)
			}
			x.raw(`</feed>`)
			break
		}
		sub, ok := findSub(sn.subs, rt.sub)
		if !ok {
			return notFoundErr(fmt.Sprintf("the subscription %q of topic %q", rt.sub, rt.entity))
		}
		switch rt.kind {
		case routeSub:
			h.subEntry(ctx, x, r, sn.ns.Name, sub)
		case routeListRules:
			p, err := h.page(r)
			if err != nil {
				return err
			}
			h.feedStart(x, r, "Rules")
			for _, ru := range window(sub.Rules, p) {
				h.ruleEntry(x, r, sn.ns.Name, sub, ru)
			}
			x.raw(`</feed>`)
		case routeRule:
			ru, ok := findRule(sub.Rules, rt.rule)
			if !ok {
				return notFoundErr(fmt.Sprintf("the rule %q of subscription %q", rt.rule, rt.sub))
			}
			h.ruleEntry(x, r, sn.ns.Name, sub, ru)
		}
	}
	if x.err != nil {
		return x.err
	}
	writeXML(w, http.StatusOK, x.String())
	return nil
}

func findSub(subs []meta.Subscription, name string) (meta.Subscription, bool) {
	for _, s := range subs {
		if strings.EqualFold(s.Name, name) {
			return s, true
		}
	}
	return meta.Subscription{}, false
}

func findRule(rules []meta.Rule, name string) (meta.Rule, bool) {
	for _, r := range rules {
		if strings.EqualFold(r.Spec.Name, name) {
			return r, true
		}
	}
	return meta.Rule{}, false
}

func writeXML(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/atom+xml;type=entry;charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?>`+body)
}

func selfURL(r *http.Request) string {
	return "https://" + r.Host + r.URL.Path + "?api-version=" + r.URL.Query().Get("api-version")
}

// entryURL is an entry's <id>: the URL of the entity itself, also inside a list feed
// (the JavaScript SDK takes entity names from it).
func entryURL(r *http.Request, path string) string {
	return "https://" + r.Host + "/" + path + "?api-version=" + r.URL.Query().Get("api-version")
}

func (h *Handler) feedStart(x *xmlWriter, r *http.Request, title string) {
	x.raw(`<feed xmlns="` + nsAtom + `"><title type="text">`)
	x.text(title)
	x.raw(`</title><id>`)
	x.text(selfURL(r))
	x.raw(`</id><updated>`)
	x.text(h.cfg.Now().UTC().Format(time.RFC3339))
	x.raw(`</updated><link rel="self" href="`)
	x.attr(selfURL(r))
	x.raw(`"/>`)
}

// entryStart opens an entry for the entity at path (as "q", "t/Subscriptions/s",
// "t/Subscriptions/s/Rules/r").
func (h *Handler) entryStart(x *xmlWriter, r *http.Request, path, title string, created, updated int64, ns string) {
	x.raw(`<entry xmlns="` + nsAtom + `"><id>`)
	x.text(entryURL(r, path))
	x.raw(`</id><title type="text">`)
	x.text(title)
	x.raw(`</title><published>` + atomTime(created) + `</published><updated>` + atomTime(updated) + `</updated><author><name>`)
	x.text(ns)
	x.raw(`</name></author><link rel="self" href="`)
	x.attr(entryURL(r, path))
	x.raw(`"/><content type="application/xml">`)
}

func (h *Handler) entryEnd(x *xmlWriter) { x.raw(`</content></entry>`) }

func (h *Handler) queueEntry(ctx context.Context, x *xmlWriter, r *http.Request, ns string, q meta.Queue) {
	c := h.runtime(ctx, x, Entity{Name: q.Name})
	h.entryStart(x, r, q.Name, q.Name, q.CreatedAt, q.UpdatedAt, ns)
	writeQueue(x, q, c)
	h.entryEnd(x)
}

func (h *Handler) topicEntry(ctx context.Context, x *xmlWriter, r *http.Request, ns string, t meta.Topic, subs []meta.Subscription) {
	c := h.runtime(ctx, x, Entity{Name: t.Name})
	h.entryStart(x, r, t.Name, t.Name, t.CreatedAt, t.UpdatedAt, ns)
	writeTopic(x, t, subs, c)
	h.entryEnd(x)
}

func (h *Handler) subEntry(ctx context.Context, x *xmlWriter, r *http.Request, ns string, s meta.Subscription) {
	c := h.runtime(ctx, x, Entity{Name: s.Topic, Subscription: s.Name})
	h.entryStart(x, r, s.Topic+"/Subscriptions/"+s.Name, s.Name, s.CreatedAt, s.UpdatedAt, ns)
	writeSubscription(x, s, c)
	h.entryEnd(x)
}

func (h *Handler) ruleEntry(x *xmlWriter, r *http.Request, ns string, sub meta.Subscription, ru meta.Rule) {
	h.entryStart(x, r, sub.Topic+"/Subscriptions/"+sub.Name+"/Rules/"+ru.Spec.Name, ru.Spec.Name, ru.CreatedAt, ru.CreatedAt, ns)
	writeRule(x, ru)
	h.entryEnd(x)
}

// ---- PUT

func (h *Handler) put(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errorf(http.StatusRequestEntityTooLarge, "the request body is larger than %d bytes", h.cfg.MaxBodyBytes)
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	root, err := parseXML(strings.NewReader(string(body)))
	if err != nil {
		return errorf(http.StatusBadRequest, "the request body is not valid XML: %v", err)
	}
	desc := root
	if root.name.Local == "entry" {
		desc = root.child("content").firstElement()
	}
	if desc == nil {
		return errorf(http.StatusBadRequest, "the request body has no entity description in <entry><content>")
	}
	update := r.Header.Get("If-Match") != ""
	want := map[routeKind][]string{
		routeEntity: {"QueueDescription", "TopicDescription"},
		routeSub:    {"SubscriptionDescription"},
		routeRule:   {"RuleDescription"},
	}[rt.kind]
	ok := false
	for _, n := range want {
		ok = ok || desc.name.Local == n
	}
	if !ok {
		return errorf(http.StatusBadRequest, "a %s cannot be PUT at %s (expected %s)", desc.name.Local, r.URL.Path, strings.Join(want, " or "))
	}

	var cmd meta.Command
	var readErr error
	if err := h.cfg.Store.Read(ctx, func(s *meta.State) {
		cmd, readErr = h.command(s, rt, desc, update)
	}); err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	if err := meta.ValidateCommand(cmd); err != nil {
		return err
	}
	if err := h.cfg.Store.Apply(ctx, cmd); err != nil {
		return immutableErr(err, strings.TrimSuffix(desc.name.Local, "Description"))
	}
	// Answer with the entity as stored.
	sn, err := h.read(ctx, rt)
	if err != nil {
		return err
	}
	x := &xmlWriter{created: !update}
	switch rt.kind {
	case routeEntity:
		switch sn.kind {
		case meta.KindQueue:
			h.queueEntry(ctx, x, r, sn.ns.Name, sn.queue)
		case meta.KindTopic:
			h.topicEntry(ctx, x, r, sn.ns.Name, sn.topic, sn.subs)
		default: // deleted between the change and this read
			return notFoundErr(fmt.Sprintf("the messaging entity %q", rt.entity))
		}
	case routeSub, routeRule:
		sub, ok := findSub(sn.subs, rt.sub)
		if !ok {
			return notFoundErr(fmt.Sprintf("the subscription %q", rt.sub))
		}
		if rt.kind == routeSub {
			h.subEntry(ctx, x, r, sn.ns.Name, sub)
		} else {
			ru, ok := findRule(sub.Rules, rt.rule)
			if !ok {
				return notFoundErr(fmt.Sprintf("the rule %q", rt.rule))
			}
			h.ruleEntry(x, r, sn.ns.Name, sub, ru)
		}
	}
	code := http.StatusCreated
	if update {
		code = http.StatusOK
	}
	// The change is committed: answer with the description even if its runtime counts
	// could not be read (x.err), or the client would retry a create into a 409.
	writeXML(w, code, x.String())
	return nil
}

// command builds the metadata command for a PUT: create from the S-ENT-2 defaults, or
// update from the current properties, overlaid with the elements present in desc.
func (h *Handler) command(s *meta.State, rt route, desc *node, update bool) (meta.Command, error) {
	parts := h.cfg.PartitionCount
	switch desc.name.Local {
	case "QueueDescription":
		if !update {
			p, err := parseQueue(desc, meta.DefaultQueueProperties(), parts)
			return &meta.CreateQueue{Name: rt.entity, Properties: p}, err
		}
		q, ok := s.Queue(rt.entity)
		if !ok {
			return nil, notFoundErr(fmt.Sprintf("the queue %q", rt.entity))
		}
		p, err := parseQueue(desc, q.Properties, parts)
		return &meta.UpdateQueue{Name: q.Name, Properties: p}, err
	case "TopicDescription":
		if !update {
			p, err := parseTopic(desc, meta.DefaultTopicProperties(), parts)
			return &meta.CreateTopic{Name: rt.entity, Properties: p}, err
		}
		t, ok := s.Topic(rt.entity)
		if !ok {
			return nil, notFoundErr(fmt.Sprintf("the topic %q", rt.entity))
		}
		p, err := parseTopic(desc, t.Properties, parts)
		return &meta.UpdateTopic{Name: t.Name, Properties: p}, err
	case "SubscriptionDescription":
		if !update {
			p, err := parseSubscription(desc, meta.DefaultSubscriptionProperties())
			if err != nil {
				return nil, err
			}
			c := &meta.CreateSubscription{Topic: rt.entity, Name: rt.sub, Properties: p}
			if d := desc.child("DefaultRuleDescription"); d != nil {
				sp, err := parseRule(d)
				if err != nil {
					return nil, meta.WithPrefix("DefaultRuleDescription", err)
				}
				if sp.Name == "" {
					sp.Name = rule.DefaultRuleName
				}
				c.Rules = []rule.Spec{sp}
			}
			return c, nil
		}
		sub, ok := s.Subscription(rt.entity, rt.sub)
		if !ok {
			return nil, notFoundErr(fmt.Sprintf("the subscription %q of topic %q", rt.sub, rt.entity))
		}
		p, err := parseSubscription(desc, sub.Properties)
		return &meta.UpdateSubscription{Topic: rt.entity, Name: sub.Name, Properties: p}, err
	default: // RuleDescription
		sp, err := parseRule(desc)
		if err != nil {
			return nil, err
		}
		sp.Name = rt.rule
		if update {
			return &meta.UpdateRule{Topic: rt.entity, Subscription: rt.sub, Rule: sp}, nil
		}
		return &meta.CreateRule{Topic: rt.entity, Subscription: rt.sub, Rule: sp}, nil
	}
}

// immutableErr words a refused change of a creation-only property as Service Bus does,
// since SDK tests match the text: "The value for the RequiresSession property of an
// existing Queue cannot be changed", "Partitioning cannot be changed for Topic. ".
func immutableErr(err error, kind string) error {
	var ve *meta.ValidationError
	if !errors.As(err, &ve) || !strings.HasPrefix(ve.Reason, "cannot be changed after creation") {
		return err
	}
	if ve.Field == "PartitionCount" || ve.Field == "EnablePartitioning" {
		return errorf(http.StatusBadRequest, "Partitioning cannot be changed for %s. %s: %s", kind, ve.Field, ve.Reason)
	}
	return errorf(http.StatusBadRequest, "The value for the %s property of an existing %s cannot be changed (%s)", ve.Field, kind, ve.Reason)
}

// ---- DELETE

func (h *Handler) delete(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) error {
	var cmd meta.Command
	switch rt.kind {
	case routeEntity:
		var kind meta.EntityKind
		if err := h.cfg.Store.Read(ctx, func(s *meta.State) { kind = s.Kind(rt.entity) }); err != nil {
			return err
		}
		switch kind {
		case meta.KindQueue:
			cmd = &meta.DeleteQueue{Name: rt.entity}
		case meta.KindTopic:
			cmd = &meta.DeleteTopic{Name: rt.entity}
		default:
			return notFoundErr(fmt.Sprintf("the messaging entity %q", rt.entity))
		}
	case routeSub:
		cmd = &meta.DeleteSubscription{Topic: rt.entity, Name: rt.sub}
	case routeRule:
		cmd = &meta.DeleteRule{Topic: rt.entity, Subscription: rt.sub, Name: rt.rule}
	default:
		return errorf(http.StatusMethodNotAllowed, "DELETE is not supported on %s", r.URL.Path)
	}
	if err := h.cfg.Store.Apply(ctx, cmd); err != nil {
		return err
	}
	// Service Bus answers a delete with 200 and an empty body; a body of only the XML
	// declaration makes the JavaScript SDK fail to parse it.
	w.WriteHeader(http.StatusOK)
	return nil
}

// ---- errors

// writeError answers with Service Bus's error body:
// <Error><Code>400</Code><Detail>… TrackingId:…, SystemTracker:…, Timestamp:…</Detail></Error>
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, rt route, err error) {
	code := http.StatusInternalServerError
	var he *httpError
	switch {
	case errors.As(err, &he):
		code = he.code
	case errors.Is(err, meta.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, meta.ErrExists):
		code = http.StatusConflict
	case errors.Is(err, meta.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		code = 499 // client went away; nobody reads the answer
	}
	now := h.cfg.Now().UTC()
	tracker := r.Host + ":" + strings.Trim(r.URL.Path, "/")
	tid := trackingID()
	detail := fmt.Sprintf("%s. TrackingId:%s, SystemTracker:%s, Timestamp:%s",
		strings.TrimSuffix(publicText(err, entityPath(r)), "."), tid, tracker, now.Format(time.RFC3339))
	// The TrackingId the client sees in the error's Detail is in the log line too.
	attrs := []any{"method", r.Method, "path", r.URL.Path, "code", code, "err", err, "tracking_id", tid}
	switch {
	case code >= 500:
		h.log.Error("admin: request failed", attrs...)
	case code == http.StatusNotFound && r.Method == http.MethodGet, code == 499:
		// The SDKs' Get* ask whether an entity exists; a client gone is nobody's refusal.
		h.log.Debug("admin: request rejected", attrs...)
	default: // every refusal is visible at the default level
		h.log.Info("admin: request rejected", attrs...)
	}
	x := &xmlWriter{}
	x.raw(`<Error><Code>` + strconv.Itoa(code) + `</Code><Detail>`)
	x.text(detail)
	x.raw(`</Detail></Error>`)
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "SharedAccessSignature")
	}
	w.WriteHeader(code)
	_, _ = io.WriteString(w, x.String())
}

func trackingID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
