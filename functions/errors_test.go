package functions

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatusOf(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want int
	}{
		{name: "nil", err: nil, want: http.StatusOK},
		{name: "plain error", err: base, want: http.StatusInternalServerError},
		{name: "bad request", err: BadRequest(base), want: http.StatusBadRequest},
		{name: "wrapped bad request", err: fmt.Errorf("decoding: %w", BadRequest(base)), want: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, StatusOf(tt.err))
		})
	}
}

func TestMarkedErrorsKeepTheirCause(t *testing.T) {
	base := errors.New("boom")
	for _, mark := range []func(error) error{BadRequest} {
		err := mark(base)
		require.ErrorIs(t, err, base)
		require.Equal(t, "boom", err.Error())
		require.NoError(t, mark(nil))
	}
}
