package meta

import (
	"errors"
	"fmt"
)

// Sentinel errors. Apply's errors wrap one of them; test with errors.Is. The admin API
// maps them to HTTP status codes (409, 404, 400).
var (
	ErrExists   = errors.New("meta: entity already exists")   // 409
	ErrNotFound = errors.New("meta: entity not found")        // 404
	ErrInvalid  = errors.New("meta: invalid request")         // 400; ValidationError carries details
	ErrBadEntry = errors.New("meta: malformed command entry") // decode errors (P3)
	ErrSnapshot = errors.New("meta: corrupt snapshot")        // Restore errors
)

// ValidationError says which field of a request is wrong and why. Field is a dotted path
// ("LockDuration", "Rules[0].Filter"); loaders prefix it with their own location
// (UserConfig.Namespaces[0].Queues[2].Properties.LockDuration).
type ValidationError struct {
	Field  string
	Reason string // e.g. `"PT1S" is below the minimum 5s`
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Unwrap makes every ValidationError match ErrInvalid.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// WithPrefix returns err with prefix prepended to the field path of a ValidationError
// (joined by "."); other errors are wrapped as "prefix: err".
func WithPrefix(prefix string, err error) error {
	if err == nil || prefix == "" {
		return err
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		f := prefix
		if ve.Field != "" {
			f = prefix + "." + ve.Field
		}
		return &ValidationError{Field: f, Reason: ve.Reason}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}
