package rule

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits on SQL filters and actions. Service Bus documents the first three (quotas page,
// "Size of SQL filters or actions"); the last two are ours and bound compile time,
// memory and evaluation depth for any input that fits the documented length.
const (
	// MaxSQLLength is the longest filter or action expression, in characters (runes).
	MaxSQLLength = 1024
	// MaxActionStatements is the largest number of SET/REMOVE statements in one action.
	MaxActionStatements = 32
	// MaxSQLDepth bounds nesting: parentheses, NOT and unary signs.
	MaxSQLDepth = 32
	// MaxSQLNodes bounds the number of operators, operands and list items in one
	// expression (one action counts all its statements together).
	MaxSQLNodes = 512
)

// Errors of the SQL filter and action language.
var (
	// ErrInvalidSQL marks every compile-time error of a SQL filter or action: syntax,
	// unknown system property or function, undefined parameter, type error in a
	// constant, exceeded limit. The admin API answers it with 400. The concrete error
	// is a *SQLError carrying the position and reason.
	ErrInvalidSQL = errors.New("rule: invalid SQL expression")
	// ErrSQLLimit additionally marks a *SQLError caused by one of the Max* limits.
	ErrSQLLimit = errors.New("rule: SQL expression exceeds a limit")
	// ErrEvaluation marks an error raised while evaluating a filter or action against
	// one message (type mismatch, division by zero, overflow, unknown system property
	// named at run time). The concrete error is an *EvalError. The fsm dead-letters
	// the message when the subscription enables
	// EnableDeadLetteringOnFilterEvaluationExceptions.
	ErrEvaluation = errors.New("rule: SQL evaluation error")
)

// SQLError is a compile-time error in a SQL filter or action. errors.Is(err,
// ErrInvalidSQL) holds for every SQLError, errors.Is(err, ErrSQLLimit) for those
// with a non-empty Limit.
type SQLError struct {
	Pos    int    // 1-based character position in the expression; 0 when not tied to one
	Syntax bool   // a grammar or lexical error, as opposed to a semantic one
	Reason string // what is wrong, e.g. "expected ')' but found 'AND'"
	Limit  string // the name of the exceeded limit (e.g. "MaxSQLLength"), or ""
}

func (e *SQLError) Error() string {
	what := "SQL error"
	if e.Syntax {
		what = "SQL syntax error"
	}
	if e.Pos > 0 {
		return fmt.Sprintf("rule: %s at position %d: %s", what, e.Pos, e.Reason)
	}
	return fmt.Sprintf("rule: %s: %s", what, e.Reason)
}

// Is reports whether target is ErrInvalidSQL, or ErrSQLLimit for a limit error.
func (e *SQLError) Is(target error) bool {
	return target == ErrInvalidSQL || (target == ErrSQLLimit && e.Limit != "")
}

// EvalError is an error raised while evaluating a SQL filter or action against one
// message. errors.Is(err, ErrEvaluation) holds for every EvalError.
type EvalError struct {
	Pos    int    // 1-based position of the operator or operand that failed
	Reason string // e.g. "operator + cannot be applied to string and long"
}

func (e *EvalError) Error() string {
	return fmt.Sprintf("rule: SQL evaluation error at position %d: %s", e.Pos, e.Reason)
}

// Is reports whether target is ErrEvaluation.
func (e *EvalError) Is(target error) bool { return target == ErrEvaluation }

// CompileSQLFilter parses and checks a Service Bus SQL filter expression (see
// docs/sql-filters.md for the grammar and semantics). params supplies the values of
// @name parameters; keys may be written with or without the leading '@'. Errors are
// *SQLError values. The returned Filter is immutable and safe for concurrent use; its
// Match does not allocate unless it must build a value (string concatenation, a LIKE
// pattern that is not a constant, an error).
func CompileSQLFilter(expr string, params []Property) (Filter, error) {
	p, err := newParser(expr, params, "filter")
	if err != nil {
		return nil, err
	}
	root, err := p.parseFilter()
	if err != nil {
		return nil, err
	}
	if c, ok := root.n.(*constNode); ok {
		// "1=1" and "1=0" (what the SDKs send for TrueFilter and FalseFilter) and any
		// other constant predicate fold to a constant at compile time.
		return constFilter(c.v.k == vBool && c.v.i != 0), nil
	}
	return &sqlFilter{expr: expr, root: root.n}, nil
}

// CompileSQLAction parses and checks a Service Bus SQL rule action: SET and REMOVE
// statements, optionally separated by ';'. params supplies @name parameters as for
// CompileSQLFilter. Errors are *SQLError values.
func CompileSQLAction(expr string, params []Property) (Action, error) {
	p, err := newParser(expr, params, "action")
	if err != nil {
		return nil, err
	}
	stmts, err := p.parseAction()
	if err != nil {
		return nil, err
	}
	return &sqlAction{expr: expr, stmts: stmts}, nil
}

// sqlFilter is a compiled SQL filter.
type sqlFilter struct {
	expr string
	root node
}

// String returns the source expression.
func (f *sqlFilter) String() string { return f.expr }

// Match evaluates the filter: the message matches only when the predicate is TRUE;
// FALSE and unknown (NULL) do not match.
func (f *sqlFilter) Match(p *Properties) (bool, error) {
	v, err := f.root.eval(p)
	if err != nil {
		return false, err
	}
	switch v.k {
	case vBool:
		return v.i != 0, nil
	case vNull:
		return false, nil
	}
	return false, &EvalError{Pos: 1, Reason: "filter result is " + v.k.String() + ", not a boolean"}
}

// runeLen is the length the limits are measured in.
func runeLen(s string) int { return utf8.RuneCountInString(s) }
