package database_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/database"
)

func TestCheckID(t *testing.T) {
	for _, id := range []string{
		"0b5f4d52-8b0b-4d57-9a0e-6a4e0a4e0a4e",
		"op id", " op", "op ", " ",
		"op\u00a0id", // no-break space
		"op\u2003id", // em space
		"op\u3000id", // ideographic space
		"op\u2028id", // line separator
		"op\tid", "op\nid", "op\r\nlevel=INFO", "op\x00", "op\x7f", "op\u0085",
		"op-é世", "op-\U0001F600", "\ufeffop", "op\u200bid",
		"%", "op%2F", "op%20id", "a+b", `op"q`, "op'q", "op--", "a..b", "...", ". ", ".a",
		strings.Repeat("a", 255), strings.Repeat("a", 256),
		strings.Repeat("a", database.MaxIDBytes),
		strings.Repeat("世", database.MaxIDBytes/3), // 1,023 bytes in 341 runes
	} {
		require.NoError(t, database.CheckID(id), "%q", id)
	}

	for _, tc := range []struct{ id, want string }{
		{"", "empty"},
		{"a/b", `'/'`},
		{`a\b`, `'\\'`},
		{"a?b", `'?'`},
		{"a#b", `'#'`},
		{"/", `'/'`},
		{".", "dot segment"},
		{"..", "dot segment"},
		{strings.Repeat("a", database.MaxIDBytes+1), "1024 bytes long, more than 1023"},
		{strings.Repeat("世", database.MaxIDBytes/3) + "a", "1024 bytes long"},
		{"op\xff", "not valid UTF-8"},
	} {
		err := database.CheckID(tc.id)
		require.Error(t, err, "%q", tc.id)
		require.True(t, errors.Is(err, database.ErrInvalidID))
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestQuoteIDShowsAndBoundsTheID(t *testing.T) {
	require.Equal(t, `"op\u00a0id\n"`, database.QuoteID("op\u00a0id\n"))
	long := database.QuoteID(strings.Repeat("é", 2000))
	require.Equal(t, `"`+strings.Repeat("é", 64)+`"...`, long)
	err := database.CheckID(strings.Repeat("a", 5000) + "/")
	require.Less(t, len(err.Error()), 200, err.Error())
}
