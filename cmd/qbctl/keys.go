package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	cs, err := g.connectionString()
	if err != nil {
		return nil, err
	}
	p, err := parseConnString(cs)
	if err != nil {
		return nil, err
	}
	sr := strings.ToLower(url.QueryEscape("https://" + p.endpoint + path))
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
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.httpClient(30 * time.Second).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// keyCmd: qbctl key list | create NAME --rights Send,Listen [--key K] | delete NAME.
func (g *globals) keyCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: key needs a verb: list, create or delete", errUsage)
	}
	verb := args[0]
	fs := flag.NewFlagSet("qbctl key "+verb, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	rights := fs.String("rights", "Send,Listen", "comma-separated rights: Manage, Send, Listen")
	key := fs.String("key", "", "the primary key (default: generated)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	switch verb {
	case "list":
		b, err := g.adminRequest(ctx, http.MethodGet, "/$keys", nil)
		if err != nil {
			return err
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
	case "create", "update":
		if len(pos) != 1 {
			return fmt.Errorf("%w: key %s takes NAME", errUsage, verb)
		}
		d := keyDescription{PrimaryKey: *key}
		for _, r := range strings.Split(*rights, ",") {
			if r = strings.TrimSpace(r); r != "" {
				d.Rights = append(d.Rights, r)
			}
		}
		body, _ := json.Marshal(d)
		b, err := g.adminRequest(ctx, http.MethodPut, "/$keys/"+url.PathEscape(pos[0]), body)
		if err != nil {
			return err
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
	case "delete":
		if len(pos) != 1 {
			return fmt.Errorf("%w: key delete takes NAME", errUsage)
		}
		if _, err := g.adminRequest(ctx, http.MethodDelete, "/$keys/"+url.PathEscape(pos[0]), nil); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "deleted key %s\n", pos[0])
		return nil
	}
	return fmt.Errorf("%w: unknown key verb %q", errUsage, verb)
}
