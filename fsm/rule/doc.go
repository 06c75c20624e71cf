// Package rule owns subscription rules: the typed property values a message carries, the
// view of a message that filters read and actions change (Properties), and the four
// filter kinds of Service Bus (true, false, correlation, SQL) with SQL rule actions.
//
// # SQL filters and actions
//
// CompileSQLFilter and CompileSQLAction implement the Service Bus SQL language (a
// SQL-92 subset). It has comparisons, AND/OR/NOT with three-valued logic, arithmetic,
// [NOT] LIKE with ESCAPE, [NOT] IN, IS [NOT] NULL, EXISTS, sys./user. scopes with
// case-insensitive names, [delimited] and "quoted" identifiers, @parameters,
// newid(), property() and p(). Actions are SET and REMOVE statements. The grammar, the
// coercion rules, the list of conditions that are evaluation errors and the limits
// are in docs/sql-filters.md. Each choice this package makes where Service Bus is
// silent is recorded there.
//
// Compilation parses and compiles in one recursive-descent pass (sqlparse.go) into a
// tree of small node types (sqleval.go). The tree is type-checked where types are
// known statically, and constant subtrees are folded, so "1=1" becomes a constant
// filter. Compile errors are *SQLError values with a 1-based character position, and
// all of them match ErrInvalidSQL. Evaluation passes an unboxed val struct by value.
// Constant LIKE patterns are compiled once (sqllike.go). Filter.Match therefore does
// not allocate. A filter matches only when its predicate is TRUE. Genuine evaluation
// errors (type mismatch, division by zero) are *EvalError values matching
// ErrEvaluation. The fsm uses them for EnableDeadLetteringOnFilterEvaluationExceptions.
// Actions are all or nothing. They change application properties only through
// Properties.Set and Remove, which copy before writing.
//
// It runs inside the replicated state machine (fsm), so it is pure: no clock, no I/O,
// no randomness (newid() is derived from the message), no map-order dependence, and
// evaluation is deterministic. It imports only the standard library. It starts no
// goroutines. Compiled filters and actions are immutable and safe for concurrent use.
package rule
