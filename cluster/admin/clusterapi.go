package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// The cluster API is the operator surface of Config.Cluster, served as JSON under
// /$cluster/ (docs/admin-api.md § Cluster API):
//
//	GET    /$cluster/status                                  ClusterStatus
//	GET    /$cluster/partitions                              []PartitionStatus
//	POST   /$cluster/nodes/{id}/drain                        204
//	POST   /$cluster/nodes/{id}/undrain                      204
//	DELETE /$cluster/nodes/{id}                              204
//	POST   /$cluster/partitions/{groupId}/transfer-leader    204 (?to=NODE, optional)
//	GET    /$cluster/rebalance                               RebalanceStatus
//	GET    /$cluster/backup                                  a backup archive (backup.go)
//	POST   /$cluster/restore                                 RestoreResult (body: an archive)
//
// It is authorized like the rest of the API (a SAS token with the Manage right), and
// answers errors as a JSON ClusterError rather than Service Bus XML: its only clients
// are qbctl and scripts, which read JSON.

// clusterPrefix starts every cluster API path. "$" cannot start an entity name, so the
// prefix never hides a queue or topic.
const clusterPrefix = "/$cluster"

// ClusterError is the body of every cluster API error.
type ClusterError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// isClusterPath reports whether path belongs to the cluster API.
func isClusterPath(path string) bool {
	if len(path) < len(clusterPrefix) || !strings.EqualFold(path[:len(clusterPrefix)], clusterPrefix) {
		return false
	}
	rest := path[len(clusterPrefix):]
	return rest == "" || rest[0] == '/'
}

// serveCluster answers a cluster API request; it reports false, having written
// nothing, when r is not one.
func (h *Handler) serveCluster(w http.ResponseWriter, r *http.Request) bool {
	if !isClusterPath(r.URL.Path) {
		return false
	}
	if err := h.clusterRequest(w, r); err != nil {
		h.writeClusterError(w, r, err)
	}
	return true
}

func (h *Handler) clusterRequest(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	authErr, err := h.readAuthorized(ctx, func(s *meta.State) error {
		return authorize(r.Header.Get("Authorization"), h.cfg.Now(), s, r.URL.Path, "")
	})
	if err != nil {
		return err
	}
	if authErr != nil {
		return &httpError{code: http.StatusUnauthorized, msg: authErr.Error()}
	}
	// Split the escaped path after its first segment ($cluster, perhaps written %24cluster),
	// so that a node ID may contain an escaped "/".
	_, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	segs := strings.Split(strings.Trim(rest, "/"), "/")
	for i, sg := range segs {
		u, err := url.PathUnescape(sg)
		if err != nil {
			return errorf(http.StatusBadRequest, "bad escape in path segment %q", sg)
		}
		segs[i] = u
	}
	allow := func(methods ...string) error {
		for _, m := range methods {
			if r.Method == m {
				return nil
			}
		}
		w.Header().Set("Allow", strings.Join(methods, ", "))
		return errorf(http.StatusMethodNotAllowed, "method %s is not supported on %s (use %s)",
			r.Method, r.URL.Path, strings.Join(methods, " or "))
	}
	c := h.cfg.Cluster
	if c == nil {
		return errorf(http.StatusNotFound, "this node does not serve the cluster API: it runs without a cluster")
	}
	switch {
	case len(segs) == 1 && segs[0] == "backup":
		if err := allow(http.MethodGet); err != nil {
			return err
		}
		return h.serveBackup(w, r, "backup")
	case len(segs) == 1 && segs[0] == "restore":
		if err := allow(http.MethodPost); err != nil {
			return err
		}
		return h.serveBackup(w, r, "restore")
	case len(segs) == 1 && segs[0] == "status":
		if err := allow(http.MethodGet); err != nil {
			return err
		}
		sctx := ctx
		if r.URL.Query().Get("digests") == "true" {
			sctx = WithDigests(ctx)
		}
		st, err := c.ClusterStatus(sctx)
		if err != nil {
			return err
		}
		if st.Members == nil {
			st.Members = []Member{}
		}
		writeJSON(w, http.StatusOK, st)
		return nil
	case len(segs) == 1 && segs[0] == "partitions":
		if err := allow(http.MethodGet); err != nil {
			return err
		}
		pctx := ctx
		if r.URL.Query().Get("digests") == "true" {
			pctx = WithDigests(ctx)
		}
		ps, err := c.Partitions(pctx)
		if err != nil {
			return err
		}
		if ps == nil {
			ps = []PartitionStatus{}
		}
		writeJSON(w, http.StatusOK, ps)
		return nil
	case len(segs) == 1 && segs[0] == "rebalance":
		if err := allow(http.MethodGet); err != nil {
			return err
		}
		rb, ok := c.(Rebalancer)
		if !ok {
			return errorf(http.StatusNotFound, "this node does not report rebalancing")
		}
		st, err := rb.RebalanceStatus(ctx)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, st)
		return nil
	case len(segs) == 3 && segs[0] == "nodes" && segs[1] != "" && segs[2] == "drain":
		if err := allow(http.MethodPost); err != nil {
			return err
		}
		if err := c.DrainNode(ctx, segs[1]); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	case len(segs) == 3 && segs[0] == "nodes" && segs[1] != "" && segs[2] == "undrain":
		if err := allow(http.MethodPost); err != nil {
			return err
		}
		if err := c.UndrainNode(ctx, segs[1]); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	case len(segs) == 2 && segs[0] == "nodes" && segs[1] != "":
		if err := allow(http.MethodDelete); err != nil {
			return err
		}
		if err := c.RemoveNode(ctx, segs[1]); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	case len(segs) == 3 && segs[0] == "partitions" && segs[2] == "transfer-leader":
		if err := allow(http.MethodPost); err != nil {
			return err
		}
		id, err := strconv.ParseUint(segs[1], 10, 32)
		if err != nil {
			return errorf(http.StatusBadRequest, "partition group id %q is not a number between 0 and %d", segs[1], uint32(1<<32-1))
		}
		if err := c.TransferLeader(ctx, uint32(id), r.URL.Query().Get("to")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return errorf(http.StatusNotFound, "unknown cluster API path %s (see docs/admin-api.md)", r.URL.Path)
}

// clusterStatusCode maps an error of the cluster API to its HTTP status, with the
// classes admin.Cluster documents.
func clusterStatusCode(err error) int {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.Is(err, meta.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, meta.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, meta.ErrExists), errors.Is(err, ErrNotEmpty):
		return http.StatusConflict
	case errors.Is(err, ErrBadArchive):
		return http.StatusUnprocessableEntity
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled):
		return 499 // client went away; nobody reads the answer
	}
	return http.StatusInternalServerError
}

func (h *Handler) writeClusterError(w http.ResponseWriter, r *http.Request, err error) {
	code := clusterStatusCode(err)
	if code >= 500 {
		h.log.Error("admin: cluster request failed", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	} else {
		h.log.Debug("admin: cluster request rejected", "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "SharedAccessSignature")
	}
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, ClusterError{Code: code, Message: publicText(err, "")})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
