package admin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/quorumbus/quorumbus/cluster/meta"
)

// KeyDescription is a namespace shared access key as the /$keys endpoint reads and
// writes it (JSON). Service Bus manages namespace keys through Azure Resource Manager,
// which Quorumbus does not serve; this endpoint is Quorumbus's own, for the same job:
// creating keys with fewer rights (Send only, Listen only, Send and Listen).
type KeyDescription struct {
	Name         string   `json:"name"`
	Rights       []string `json:"rights"`
	PrimaryKey   string   `json:"primaryKey,omitempty"`
	SecondaryKey string   `json:"secondaryKey,omitempty"`
}

// keys serves GET /$keys (list), GET, PUT and DELETE /$keys/NAME. The request is
// already authorized with the Manage right. rt.rule holds the key name.
func (h *Handler) keys(ctx context.Context, w http.ResponseWriter, r *http.Request, rt route) error {
	name := rt.rule
	switch {
	case r.Method == http.MethodGet:
		var out []KeyDescription
		if err := h.cfg.Store.Read(ctx, func(s *meta.State) {
			for _, k := range s.SASKeys() {
				if name == "" || strings.EqualFold(k.Name, name) {
					out = append(out, keyDescription(k))
				}
			}
		}); err != nil {
			return err
		}
		if name == "" {
			writeJSON(w, http.StatusOK, out)
			return nil
		}
		if len(out) == 0 {
			return notFoundErr(fmt.Sprintf("the key %q", name))
		}
		writeJSON(w, http.StatusOK, out[0])
		return nil
	case name == "":
		return errorf(http.StatusMethodNotAllowed, "%s is not supported on /$keys; name a key: /$keys/NAME", r.Method)
	case r.Method == http.MethodDelete:
		if err := h.cfg.Store.Apply(ctx, &meta.DeleteSASKey{Name: name}); err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		return errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	var d KeyDescription
	if err := json.Unmarshal(body, &d); err != nil {
		return errorf(http.StatusBadRequest, "the request body is not a key description (JSON): %v", err)
	}
	k := meta.SASKey{Name: name, PrimaryKey: d.PrimaryKey, SecondaryKey: d.SecondaryKey}
	if d.Name != "" && !strings.EqualFold(d.Name, name) {
		return errorf(http.StatusBadRequest, "the body names key %q, the path %q", d.Name, name)
	}
	if len(d.Rights) == 0 {
		return errorf(http.StatusBadRequest, "rights: at least one of Manage, Send, Listen is required")
	}
	for _, s := range d.Rights {
		right, err := meta.ParseRight(s)
		if err != nil {
			return errorf(http.StatusBadRequest, "rights: %v", err)
		}
		k.Rights |= right
	}
	if k.PrimaryKey == "" {
		k.PrimaryKey = newKey()
	}
	cmd := &meta.PutSASKey{Key: k}
	if err := meta.ValidateCommand(cmd); err != nil {
		return err
	}
	if err := h.cfg.Store.Apply(ctx, cmd); err != nil {
		return err
	}
	var stored meta.SASKey
	var ok bool
	if err := h.cfg.Store.Read(ctx, func(s *meta.State) { stored, ok = s.SASKey(name) }); err != nil {
		return err
	}
	if !ok {
		return errors.New("admin: the key vanished after it was stored")
	}
	writeJSON(w, http.StatusOK, keyDescription(stored))
	return nil
}

func keyDescription(k meta.SASKey) KeyDescription {
	return KeyDescription{Name: k.Name, Rights: k.Rights.Names(), PrimaryKey: k.PrimaryKey, SecondaryKey: k.SecondaryKey}
}

// newKey returns a random 256-bit key, base64 as Service Bus writes keys.
func newKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}
