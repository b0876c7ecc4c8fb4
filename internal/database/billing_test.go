package database_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/database"
)

// A billing item written by one version must be found by the next: the
// id of a cluster's life never changes.
func TestBillingIDIsStable(t *testing.T) {
	require.Equal(t, "6b973b2b-3ef3-8d22-b94b-35a153baeb46", database.BillingID(clusterKey, "2l3o4k5j6h7g8f9d0s1a2q3w4e5r6t7y"))
}

func TestBillingIDNamesOneLifeOfACluster(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	id := database.BillingID(clusterKey, "c1")
	require.Regexp(t, uuid, id)
	require.NoError(t, database.CheckID(id))
	for _, tc := range []struct {
		name                  string
		resourceID, clusterID string
		same                  bool
	}{
		{"the resource ID in another case", strings.ToUpper(clusterKey), "c1", true},
		{"a cluster re-created under the same resource ID", clusterKey, "c2", false},
		{"another cluster with the same Cluster Service id", clusterKey + "2", "c1", false},
		{"the parts joined differently", clusterKey + "c", "1", false},
	} {
		other := database.BillingID(tc.resourceID, tc.clusterID)
		require.Regexp(t, uuid, other, tc.name)
		require.Equal(t, tc.same, other == id, tc.name)
	}
}

func TestIsBillingID(t *testing.T) {
	for _, id := range []string{database.BillingID(clusterKey, "c1"), database.BillingID(clusterKey, "c2"),
		database.BillingID("", ""), "6b973b2b-3ef3-8d22-b94b-35a153baeb46"} {
		require.True(t, database.IsBillingID(id), id)
	}
	for _, id := range []string{
		"6b973b2b-3ef3-4d22-b94b-35a153baeb46", // version 4: the backend's random ids
		"6b973b2b-3ef3-8d22-794b-35a153baeb46", // another variant
		"6B973B2B-3EF3-8D22-B94B-35A153BAEB46",
		"6b973b2b-3ef3-8d22-b94b-35a153baeb4",
		"6b973b2b-3ef3-8d22-b94b-35a153baeb466",
		"6b973b2b3ef3-8d22-b94b-35a153baeb46-",
		"6b973b2g-3ef3-8d22-b94b-35a153baeb46",
		"b-delete3", "", "random-uuid",
	} {
		require.False(t, database.IsBillingID(id), id)
	}
}

func TestBillingJSON(t *testing.T) {
	deleted := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	b := database.Billing{ID: "b1", SubscriptionID: "sub1", ResourceID: clusterKey,
		CreationTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	out, err := json.Marshal(b)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"b1","subscriptionId":"sub1","resourceId":"`+clusterKey+`","creationTime":"2026-01-02T03:04:05Z"}`,
		string(out), "no deletionTime, nor empty fields, until they are set")

	// An item that does not decode keeps everything but its deletionTime.
	in := `{"id":"b2","subscriptionId":"sub1","resourceId":"r","creationTime":"yesterday","x":[1],"_etag":"\"3\"","_ts":5}`
	require.NoError(t, json.Unmarshal([]byte(in), &b))
	require.ErrorIs(t, b.Err, database.ErrMalformed)
	require.ErrorContains(t, b.Err, `"b2"`)
	require.Equal(t, "\"3\"", string(b.ETag))
	require.Equal(t, "sub1", b.SubscriptionID)
	require.Equal(t, "r", b.ResourceID)
	b.ResourceID, b.TenantID, b.DeletionTime = "changed", "t", &deleted
	out, err = json.Marshal(b)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"b2","subscriptionId":"sub1","resourceId":"r","creationTime":"yesterday","x":[1],`+
		`"deletionTime":"2026-03-04T05:06:07Z"}`, string(out))
	require.Error(t, b.Validate(), "never created")

	for _, bad := range []string{`[]`, `{"id":5,"creationTime":"yesterday"}`, `{"creationTime":1}`} {
		require.Error(t, json.Unmarshal([]byte(bad), &database.Billing{}), bad)
	}
}
