package functions

import (
	"errors"
	"net/http"
)

// statusError carries the HTTP status an error answers with.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// BadRequest marks err as bad input: the invocation answers 400. Retrying
// will not help, but the host still retries a failed queue message until it
// moves it to the poison queue. BadRequest(nil) is nil.
func BadRequest(err error) error {
	if err == nil {
		return nil
	}
	return &statusError{status: http.StatusBadRequest, err: err}
}

// StatusOf returns the HTTP status an invocation answers with when its
// handler returns err: 200 for nil, 400 for BadRequest (also when wrapped
// with %w), 500 for anything else.
func StatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	if se, ok := errors.AsType[*statusError](err); ok {
		return se.status
	}
	return http.StatusInternalServerError
}
