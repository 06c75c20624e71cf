package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// table is what most commands print: rows under a header, or the same as JSON objects
// keyed by jsonKeys, or else by the header names in the SDK's style (jsonKey), when
// --output json.
//
// Every -o json output names its keys one way: as the Go SDK (azservicebus and its admin
// package) names the fields, PascalCase with Go's initialisms ("ActiveMessageCount",
// "MessageID", "AMQPAddr"). That is also what `show -o json` files carry into
// --from-file.
type table struct {
	header   []string
	jsonKeys []string // the SDK's names for the columns
	rows     [][]any
}

func (t *table) add(cells ...any) { t.rows = append(t.rows, cells) }

func (g *globals) print(t *table) error {
	if g.output == "json" {
		return g.printJSON(t.jsonRows())
	}
	return writeTable(g.stdout, t)
}

// jsonRows is the table as JSON objects keyed by jsonKeys or the header names (jsonKey).
func (t *table) jsonRows() []map[string]any {
	out := make([]map[string]any, 0, len(t.rows))
	for _, r := range t.rows {
		m := make(map[string]any, len(r))
		for i, c := range r {
			k := jsonKey(t.header[i])
			if t.jsonKeys != nil {
				k = t.jsonKeys[i]
			}
			m[k] = jsonValue(c)
		}
		out = append(out, m)
	}
	return out
}

// printJSON writes v indented, with <, > and & as they are (a SQL filter "a > 1" reads
// as such, not "a \u003e 1").
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// marshal is json.Marshal without HTML escaping.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// printKV prints one object: "key  value" lines, or a JSON object keyed by jsonKey(key).
func (g *globals) printKV(keys []string, values []any) error {
	if g.output == "json" {
		m := make(map[string]any, len(keys))
		for i, k := range keys {
			m[jsonKey(k)] = jsonValue(values[i])
		}
		return g.printJSON(m)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	for i, k := range keys {
		fmt.Fprintf(w, "%s\t%s\n", k, cellString(values[i]))
	}
	return w.Flush()
}

// object is one entity or rule: keys in the order they print, named as the SDK names
// them (in JSON too, unlike printKV's lower-cased keys).
type object struct {
	keys []string
	vals []any
}

func (o *object) add(k string, v any) *object {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
	return o
}

// MarshalJSON writes the keys in order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := marshal(k)
		vb, err := marshal(jsonValue(o.vals[i]))
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func (g *globals) printObject(o *object) error {
	if g.output == "json" {
		return g.printJSON(o)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	for i, k := range o.keys {
		fmt.Fprintf(w, "%s\t%s\n", k, cellString(o.vals[i]))
	}
	return w.Flush()
}

func writeTable(out io.Writer, t *table) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = cellString(c)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return w.Flush()
}

// initialisms are the words Go (and so the SDK) writes in capitals.
var initialisms = map[string]bool{"ID": true, "AMQP": true, "SKU": true, "URL": true, "OK": true, "TTL": true}

// jsonKey is a header or key name in the SDK's style: "CLUSTER ADDR" -> "ClusterAddr",
// "MESSAGE-ID" -> "MessageID", "primary key" -> "PrimaryKey".
func jsonKey(h string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(h, func(r rune) bool { return r == ' ' || r == '-' || r == '_' }) {
		if u := strings.ToUpper(w); initialisms[u] {
			b.WriteString(u)
			continue
		}
		b.WriteString(strings.ToUpper(w[:1]) + strings.ToLower(w[1:]))
	}
	return b.String()
}

func jsonValue(c any) any {
	switch v := c.(type) {
	case time.Duration:
		return v.String()
	case time.Time:
		if v.IsZero() {
			return nil
		}
		return v.UTC().Format(time.RFC3339Nano)
	case *object:
		return v
	}
	return deref(c)
}

func cellString(c any) string {
	switch v := jsonValue(c).(type) {
	case nil:
		return "-"
	case string:
		if v == "" {
			return "-"
		}
		return v
	default:
		return fmt.Sprint(v)
	}
}

// deref turns the admin client's pointer fields into values (nil stays nil).
func deref(c any) any {
	switch v := c.(type) {
	case *string:
		if v == nil {
			return nil
		}
		return *v
	case *int32:
		if v == nil {
			return nil
		}
		return *v
	case *int64:
		if v == nil {
			return nil
		}
		return *v
	case *bool:
		if v == nil {
			return nil
		}
		return *v
	case *admin.EntityStatus:
		if v == nil {
			return nil
		}
		return string(*v)
	}
	return c
}
