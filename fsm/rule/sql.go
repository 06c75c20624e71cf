package rule

import "errors"

// errSQLNotImplemented is returned until the SQL filter language lands (issue 6).
var errSQLNotImplemented = errors.New("rule: SQL filters and actions are not implemented yet")

// CompileSQLFilter parses a Service Bus SQL filter expression.
func CompileSQLFilter(expr string, params []Property) (Filter, error) {
	return nil, errSQLNotImplemented
}

// CompileSQLAction parses a Service Bus SQL rule action (SET/REMOVE statements).
func CompileSQLAction(expr string, params []Property) (Action, error) {
	return nil, errSQLNotImplemented
}
