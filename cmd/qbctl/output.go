package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// table is what most commands print: rows under a header, or the same as JSON objects
// keyed by jsonKeys, or else by the header names (lower-cased), when --output json.
type table struct {
	header   []string
	jsonKeys []string // the SDK's names for the columns of entity lists
	rows     [][]any
}

func (t *table) add(cells ...any) { t.rows = append(t.rows, cells) }

func (g *globals) print(t *table) error {
	if g.output == "json" {
		return g.printJSON(t.jsonRows())
	}
	return writeTable(g.stdout, t)
}

// jsonRows is the table as JSON objects keyed by the header names, lower-cased.
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

func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printKV prints one object: "key  value" lines, or a JSON object.
func (g *globals) printKV(keys []string, values []any) error {
	if g.output == "json" {
		m := make(map[string]any, len(keys))
		for i, k := range keys {
			m[jsonKey(k)] = jsonValue(values[i])
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
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
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(jsonValue(o.vals[i]))
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

func jsonKey(h string) string { return strings.ToLower(strings.ReplaceAll(h, " ", "_")) }

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
