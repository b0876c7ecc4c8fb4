package poll

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOwnerSuffix(t *testing.T) {
	guid := "5f0e9d1c-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
	require.Equal(t, guid, ownerSuffix(guid))
	require.Equal(t, "", ownerSuffix(""))
	for _, odd := range []string{strings.Repeat("a", 16<<10), "a/b", "x\x00y", "ünï", `"quoted"`} {
		got := ownerSuffix(odd)
		require.Len(t, got, 17, odd)
		require.Regexp(t, `^h[0-9a-f]{16}$`, got)
	}
	require.NotEqual(t, ownerSuffix("a/b"), ownerSuffix("a/c"))
}
