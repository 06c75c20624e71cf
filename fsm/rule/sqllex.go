package rule

import (
	"strings"
	"unicode"
)

// tokKind is the class of a lexical token.
type tokKind uint8

const (
	tEOF     tokKind = iota
	tIdent           // regular identifier (never a keyword)
	tDelim           // [delimited] or "quoted" identifier; text is unescaped
	tKeyword         // reserved word; kw says which
	tString          // 'string'; text is unescaped
	tInt             // integer constant; text is the digits
	tDouble          // decimal or approximate constant; text as written
	tParam           // @name; text is the name without '@'
	tOp              // = <> != > >= < <= + - * / %
	tLParen
	tRParen
	tComma
	tSemi
	tDot
)

// keyword is a reserved word of the language.
type keyword uint8

const (
	kwNone keyword = iota
	kwAnd
	kwOr
	kwNot
	kwIs
	kwNull
	kwLike
	kwEscape
	kwIn
	kwExists
	kwTrue
	kwFalse
	kwSet
	kwRemove
)

var keywords = [...]string{"", "AND", "OR", "NOT", "IS", "NULL", "LIKE", "ESCAPE", "IN", "EXISTS",
	"TRUE", "FALSE", "SET", "REMOVE"}

func lookupKeyword(s string) keyword {
	for i := 1; i < len(keywords); i++ {
		if strings.EqualFold(s, keywords[i]) {
			return keyword(i)
		}
	}
	return kwNone
}

type token struct {
	kind tokKind
	kw   keyword
	pos  int // 1-based rune position of the first character
	text string
}

// describe renders a token for an error message: 'AND', 'foo', end of expression.
func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of expression"
	case tKeyword:
		return "'" + keywords[t.kw] + "'"
	case tString:
		return "string '" + clip(t.text) + "'"
	case tDelim:
		return "identifier [" + clip(t.text) + "]"
	case tParam:
		return "parameter @" + clip(t.text)
	}
	return "'" + clip(t.text) + "'"
}

func clip(s string) string {
	if r := []rune(s); len(r) > 32 {
		return string(r[:32]) + "..."
	}
	return s
}

// lex splits src into tokens, ending with a tEOF token.
func lex(src []rune) ([]token, error) {
	var toks []token
	i := 0
	for {
		for i < len(src) && unicode.IsSpace(src[i]) {
			i++
		}
		if i >= len(src) {
			return append(toks, token{kind: tEOF, pos: len(src) + 1}), nil
		}
		start := i
		c := src[i]
		switch {
		case unicode.IsLetter(c):
			for i < len(src) && (unicode.IsLetter(src[i]) || unicode.IsDigit(src[i]) || src[i] == '_') {
				i++
			}
			text := string(src[start:i])
			if kw := lookupKeyword(text); kw != kwNone {
				toks = append(toks, token{kind: tKeyword, kw: kw, pos: start + 1, text: text})
			} else {
				toks = append(toks, token{kind: tIdent, pos: start + 1, text: text})
			}
			continue
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			kind := tInt
			for i < len(src) && src[i] >= '0' && src[i] <= '9' {
				i++
			}
			if i < len(src) && src[i] == '.' {
				kind = tDouble
				i++
				for i < len(src) && src[i] >= '0' && src[i] <= '9' {
					i++
				}
			}
			if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
				kind = tDouble
				i++
				if i < len(src) && (src[i] == '+' || src[i] == '-') {
					i++
				}
				d := i
				for i < len(src) && src[i] >= '0' && src[i] <= '9' {
					i++
				}
				if d == i {
					return nil, syntaxErr(i+1, "malformed number: exponent has no digits")
				}
			}
			if i < len(src) && (unicode.IsLetter(src[i]) || src[i] == '_' || src[i] == '.') {
				return nil, syntaxErr(i+1, "malformed number '%s'", string(src[start:i+1]))
			}
			toks = append(toks, token{kind: kind, pos: start + 1, text: string(src[start:i])})
			continue
		case c == '\'', c == '[', c == '"':
			closer := c
			if c == '[' {
				closer = ']'
			}
			var b strings.Builder
			i++
			closed := false
			for i < len(src) {
				if src[i] == closer {
					if i+1 < len(src) && src[i+1] == closer {
						b.WriteRune(closer)
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				b.WriteRune(src[i])
				i++
			}
			if !closed {
				what := map[rune]string{'\'': "string constant", '[': "delimited identifier", '"': "quoted identifier"}[c]
				return nil, syntaxErr(start+1, "unterminated %s", what)
			}
			if c == '\'' {
				toks = append(toks, token{kind: tString, pos: start + 1, text: b.String()})
				continue
			}
			if b.Len() == 0 {
				return nil, syntaxErr(start+1, "empty identifier")
			}
			toks = append(toks, token{kind: tDelim, pos: start + 1, text: b.String()})
			continue
		case c == '@':
			i++
			for i < len(src) && (unicode.IsLetter(src[i]) || unicode.IsDigit(src[i]) || src[i] == '_') {
				i++
			}
			if i == start+1 {
				return nil, syntaxErr(start+1, "'@' must be followed by a parameter name")
			}
			toks = append(toks, token{kind: tParam, pos: start + 1, text: string(src[start+1 : i])})
			continue
		}
		// Punctuation and operators.
		i++
		t := token{kind: tOp, pos: start + 1, text: string(c)}
		switch c {
		case '(':
			t.kind = tLParen
		case ')':
			t.kind = tRParen
		case ',':
			t.kind = tComma
		case ';':
			t.kind = tSemi
		case '.':
			t.kind = tDot
		case '=', '+', '-', '*', '/', '%':
		case '<':
			if i < len(src) && (src[i] == '>' || src[i] == '=') {
				t.text += string(src[i])
				i++
			}
		case '>':
			if i < len(src) && src[i] == '=' {
				t.text = ">="
				i++
			}
		case '!':
			if i < len(src) && src[i] == '=' {
				t.text = "!="
				i++
			} else {
				return nil, syntaxErr(start+1, "unexpected character '!' (did you mean '!=' or NOT?)")
			}
		default:
			return nil, syntaxErr(start+1, "unexpected character %q", c)
		}
		toks = append(toks, t)
	}
}
