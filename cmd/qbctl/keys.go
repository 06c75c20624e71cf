package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// keyDescription is the JSON of the admin API's /$keys (docs/admin-api.md).
type keyDescription struct {
	Name         string   `json:"name"`
	Rights       []string `json:"rights"`
	PrimaryKey   string   `json:"primaryKey,omitempty"`
	SecondaryKey string   `json:"secondaryKey,omitempty"`
}

// connParts are the fields of a Service Bus connection string qbctl signs with.
type connParts struct {
	endpoint, keyName, key string // endpoint: host[:port]
	emulator               bool
}

func parseConnString(cs string) (connParts, error) {
	var p connParts
	for _, kv := range strings.Split(cs, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		switch strings.ToLower(k) {
		case "endpoint":
			u, err := url.Parse(v)
			if err != nil {
				return p, fmt.Errorf("connection string: Endpoint %q: %v", v, err)
			}
			p.endpoint = u.Host
		case "sharedaccesskeyname":
			p.keyName = v
		case "sharedaccesskey":
			p.key = v
		case "usedevelopmentemulator":
			p.emulator = strings.EqualFold(v, "true")
		}
	}
	if p.endpoint == "" || p.keyName == "" || p.key == "" {
		return p, fmt.Errorf("connection string needs Endpoint, SharedAccessKeyName and SharedAccessKey")
	}
	return p, nil
}

// adminRequest sends a signed request to the node's admin API (for the endpoints the
// SDK's admin client does not know) and returns the body of a 2xx answer.
func (g *globals) adminRequest(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	return g.adminDo(ctx, method, path, body, "application/json", nil)
}

// adminDo is adminRequest with the body's content type and more headers.
func (g *globals) adminDo(ctx context.Context, method, path string, body []byte, contentType string, header map[string]string) ([]byte, error) {
	cs, err := g.connectionString()
	if err != nil {
		return nil, err
	}
	p, err := parseConnString(cs)
	if err != nil {
		return nil, err
	}
	resource, _, _ := strings.Cut(path, "?") // the token names the resource, not the query
	sr := strings.ToLower(url.QueryEscape("https://" + p.endpoint + resource))
	se := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	mac := hmac.New(sha256.New, []byte(p.key))
	mac.Write([]byte(sr + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	req, err := http.NewRequestWithContext(ctx, method, g.adminURL(path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "SharedAccessSignature sr="+sr+"&sig="+sig+"&se="+se+"&skn="+p.keyName)
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := g.httpClient(30 * time.Second).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return nil, &statusError{code: resp.StatusCode, detail: atomDetail(string(b))}
	}
	return b, nil
}

// keyCmd: qbctl key list | create NAME --rights Send,Listen [--key K] | delete NAME.
func (g *globals) keyCmd() *cobra.Command {
	keyTarget := func(pos []string) target {
		t := target{kind: "key", list: "qbctl key list"}
		if len(pos) > 0 {
			t.name = pos[0]
		}
		return t
	}
	list := &cobra.Command{Use: "list", Short: "list the namespace's shared access keys", Args: nArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			b, err := g.adminRequest(c.Context(), http.MethodGet, "/$keys", nil)
			if err != nil {
				return g.human(err, target{kind: "key", list: "qbctl key list"})
			}
			var keys []keyDescription
			if err := json.Unmarshal(b, &keys); err != nil {
				return err
			}
			t := &table{header: []string{"NAME", "RIGHTS"}}
			for _, k := range keys {
				t.add(k.Name, strings.Join(k.Rights, ","))
			}
			return g.print(t)
		}}
	var rights, key string
	create := &cobra.Command{Use: "create NAME [--rights Send,Listen] [--key KEY]", Aliases: []string{"update"},
		Short: "create or replace a shared access key and print its connection string", Args: nArgs("NAME"),
		RunE: func(c *cobra.Command, pos []string) error {
			d := keyDescription{PrimaryKey: key}
			for _, r := range strings.Split(rights, ",") {
				if r = strings.TrimSpace(r); r != "" {
					d.Rights = append(d.Rights, r)
				}
			}
			body, _ := json.Marshal(d)
			b, err := g.adminRequest(c.Context(), http.MethodPut, "/$keys/"+url.PathEscape(pos[0]), body)
			if err != nil {
				return g.human(err, keyTarget(pos))
			}
			if err := json.Unmarshal(b, &d); err != nil {
				return err
			}
			cs, _ := g.connectionString()
			p, _ := parseConnString(cs)
			conn := "Endpoint=sb://" + p.endpoint + ";SharedAccessKeyName=" + d.Name + ";SharedAccessKey=" + d.PrimaryKey
			if p.emulator {
				conn += ";UseDevelopmentEmulator=true"
			}
			return g.printKV([]string{"NAME", "RIGHTS", "PRIMARY KEY", "CONNECTION STRING"},
				[]any{d.Name, strings.Join(d.Rights, ","), d.PrimaryKey, conn})
		}}
	create.Flags().StringVar(&rights, "rights", "Send,Listen", "comma-separated rights: Manage, Send, Listen")
	create.Flags().StringVar(&key, "key", "", "the primary key (default: generated)")
	del := &cobra.Command{Use: "delete NAME", Short: "delete a shared access key", Args: nArgs("NAME"),
		RunE: func(c *cobra.Command, pos []string) error {
			if _, err := g.adminRequest(c.Context(), http.MethodDelete, "/$keys/"+url.PathEscape(pos[0]), nil); err != nil {
				return g.human(err, keyTarget(pos))
			}
			fmt.Fprintf(g.stdout, "deleted key %s\n", pos[0])
			return nil
		}}
	return group("key", "namespace shared access keys: list, create, delete", []string{"keys"}, list, create, del)
}
