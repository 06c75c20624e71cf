package admin_test

import (
	"encoding/json"
)

// js renders a value for failure messages; equalJSON compares two values by their JSON
// form, which follows pointers (the admin client's properties are all pointers).
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func equalJSON(a, b any) bool { return js(a) == js(b) }
