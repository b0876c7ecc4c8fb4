package chaos

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAs2024 checks the draw of the 2024-10 frontend's requests: a share
// of the cluster and node pool operations, never another kind; UUIDs for
// the operation and its own item; clusters_mgmt internalIds only; a delete
// Deleting from the start; a converted create's follow-up delete converted
// with it, naming its new id and item; the same seed, the same draw.
func TestAs2024(t *testing.T) {
	draw := func() []op {
		rng := rand.New(rand.NewPCG(7, 7))
		ops := scenario(rng, subscriptions(10, "as2024"), 500, 3*time.Second, 45*time.Second, "a")
		return as2024(rng, ops, 1.0/3)
	}
	ops := draw()
	require.Equal(t, ops, draw(), "the seed fixes the draw")
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	byID := map[string]op{}
	converted, eligible := 0, 0
	for _, o := range ops {
		byID[o.ID] = o
		if o.Auth == "" && o.Credential == "" && o.ownsItem() && o.After == "" {
			eligible++
		}
		if !o.Aro2024 {
			require.False(t, uuid.MatchString(o.ID), o.ID)
			continue
		}
		converted++
		require.Empty(t, o.Auth+o.Credential, "%s: only clusters and node pools", o.ID)
		require.Regexp(t, uuid, o.ID)
		require.Regexp(t, uuid, o.Items[0].ID)
		require.Equal(t, o.ID, o.Items[0].Active)
		require.Equal(t, o.Start, o.Items[0].State)
		if o.Request == "Delete" {
			require.Equal(t, "Deleting", o.Start)
		}
		for _, it := range o.Items {
			require.True(t, strings.HasPrefix(it.InternalID, cmAPI), "%s: item %s has %s", o.ID, it.ID, it.InternalID)
		}
		if o.After != "" {
			create, ok := byID[o.After]
			require.True(t, ok, "%s follows %s, drawn before it", o.ID, o.After)
			require.True(t, create.Aro2024)
			require.Equal(t, create.Items[0].ID, o.Items[0].ID)
		}
	}
	for _, o := range ops {
		if o.After != "" && !o.Aro2024 {
			require.False(t, byID[o.After].Aro2024, "%s follows a converted create", o.ID)
		}
	}
	require.InDelta(t, float64(eligible)/3, float64(converted), float64(eligible)/6, "about a third of %d", eligible)

	// Each canceled create has its delete, which waits for it to be
	// Provisioning and finds its item.
	canceled := 0
	for _, o := range ops {
		if o.Kind != kindCreateCanceled {
			continue
		}
		canceled++
		require.True(t, o.Aro2024)
		require.Equal(t, "Canceled", o.Want)
		require.Empty(t, o.WantCode)
		var dels []op
		for _, d := range ops {
			if d.After == o.ID {
				dels = append(dels, d)
			}
		}
		require.Len(t, dels, 1, o.ID)
		d := dels[0]
		require.Equal(t, kindDeleteCanceling, d.Kind)
		require.True(t, d.Cancels)
		require.True(t, d.Aro2024)
		require.Equal(t, "Deleting", d.Start)
		require.Equal(t, "Succeeded", d.Want)
		require.Equal(t, o.Items[0].ID, d.Items[0].ID)
		require.Equal(t, d.ID, d.Items[0].Active)
		for _, it := range d.Items {
			require.True(t, it.Removed, it.ID)
		}
	}
	require.Positive(t, canceled, "creates canceled by their delete drawn")
}
