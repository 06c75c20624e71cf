package admin

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// XML namespaces of the ATOM management API.
const (
	nsAtom     = "http://www.w3.org/2005/Atom"
	nsSB       = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
	nsXSI      = "http://www.w3.org/2001/XMLSchema-instance"
	nsXSD      = "http://www.w3.org/2001/XMLSchema"
	nsSBCounts = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
)

// node is a parsed XML element. encoding/xml resolves prefixes, so Name.Space and attribute
// spaces hold namespace URLs whatever prefix the client made up (protocol.md §10: Go's
// encoder writes _XMLSchema-instance:type).
type node struct {
	name     xml.Name
	attrs    []xml.Attr
	children []*node
	text     string
}

const maxDepth = 64

func parseXML(r io.Reader) (*node, error) {
	d := xml.NewDecoder(r)
	var stack []*node
	var root *node
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &node{name: t.Name, attrs: t.Attr}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
			} else if root == nil {
				root = n
			} else {
				return nil, errors.New("more than one root element")
			}
			stack = append(stack, n)
			if len(stack) > maxDepth {
				return nil, errors.New("XML nested too deeply")
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(t)
			}
		}
	}
	if root == nil {
		return nil, errors.New("empty document")
	}
	return root, nil
}

// child returns the first child element with the given local name.
func (n *node) child(local string) *node {
	if n == nil {
		return nil
	}
	for _, c := range n.children {
		if c.name.Local == local {
			return c
		}
	}
	return nil
}

// firstElement returns the first child element.
func (n *node) firstElement() *node {
	if n == nil || len(n.children) == 0 {
		return nil
	}
	return n.children[0]
}

// xsiType returns the element's xsi:type without any prefix ("SqlFilter", "string").
// It accepts the XMLSchema-instance namespace under any prefix, and an undeclared "i:"
// prefix as a lenient fallback.
func (n *node) xsiType() string {
	var fallback string
	for _, a := range n.attrs {
		if a.Name.Local != "type" {
			continue
		}
		if a.Name.Space == nsXSI {
			return localName(a.Value)
		}
		if a.Name.Space == "i" || a.Name.Space == "xsi" {
			fallback = localName(a.Value)
		}
	}
	return fallback
}

func localName(qname string) string {
	if i := strings.LastIndexByte(qname, ':'); i >= 0 {
		return qname[i+1:]
	}
	return qname
}

func (n *node) String() string {
	return fmt.Sprintf("<%s>", n.name.Local)
}

// xmlWriter builds a response document.
type xmlWriter struct {
	b strings.Builder
	// err is the first failure met while building the body (runtime counts that could
	// not be read); the handler answers with it instead of the body.
	err error
	// created: the body describes an entity just created, whose runtime counts are all
	// zero; they are not read, since its partitions may not serve yet.
	created bool
}

func (w *xmlWriter) raw(s string) { w.b.WriteString(s) }

// textEscaper escapes character data. Quotes stay literal, as Service Bus writes them:
// the JavaScript SDK's XML parser does not decode &#39; or &#34;, so a SQL filter such
// as `color = 'red'` would read back with the entities in it.
var textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\r", "&#xD;")

// attrEscaper escapes a double-quoted attribute value.
var attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "\r", "&#xD;", "\n", "&#xA;", "\t", "&#x9;")

func (w *xmlWriter) text(s string) { _, _ = textEscaper.WriteString(&w.b, s) }

func (w *xmlWriter) attr(s string) { _, _ = attrEscaper.WriteString(&w.b, s) }

// el writes <name>value</name> with value escaped.
func (w *xmlWriter) el(name, value string) {
	w.b.WriteByte('<')
	w.b.WriteString(name)
	w.b.WriteByte('>')
	w.text(value)
	w.b.WriteString("</")
	w.b.WriteString(name)
	w.b.WriteByte('>')
}

func (w *xmlWriter) String() string { return w.b.String() }
