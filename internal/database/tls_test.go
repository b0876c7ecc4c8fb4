package database_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
)

// databaseWithOneOperation creates a database named after prefix with the
// frontend's schema and one pending operation "op" in subscription "sub".
func databaseWithOneOperation(t *testing.T, prefix string) (string, *frontend.Frontend) {
	t.Helper()
	ctx := context.Background()
	dbSeq++
	name := fmt.Sprintf("%s%d", prefix, dbSeq)
	require.NoError(t, frontend.CreateSchema(ctx, cosmos.Endpoint, cosmos.Key, name, 5*time.Second))
	fe, err := frontend.New(cosmos.Endpoint, cosmos.Key, name)
	require.NoError(t, err)
	require.NoError(t, fe.PutOperation(ctx, frontend.Operation{
		ID: "op", PartitionKey: "sub", Request: "Create", Status: "Accepted",
		ExternalID: "/subscriptions/sub/x", InternalID: "/api/clusters_mgmt/v1/clusters/c",
	}))
	return name, fe
}

// TestCosmosTLSVerification shows that certificate verification is on unless
// InsecureSkipVerify is set: the test server's self-signed certificate is
// refused by default, on every kind of request, and accepted with the setting.
func TestCosmosTLSVerification(t *testing.T) {
	ctx := context.Background()
	name, fe := databaseWithOneOperation(t, "tls")

	client := func(insecure bool) *database.CosmosClient {
		c, err := database.NewCosmosClient(database.CosmosConfig{
			Endpoint: cosmos.Endpoint, Database: name, Key: cosmos.Key, InsecureSkipVerify: insecure,
			OperationsContainer: "Operations", ResourcesContainer: "Resources", LocksContainer: "Locks",
		})
		require.NoError(t, err)
		return c
	}
	requireRefused := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		var verr *tls.CertificateVerificationError
		require.True(t, errors.As(err, &verr), "want a certificate verification error, got %v", err)
		require.NotContains(t, err.Error(), cosmos.Key)
	}

	strict := client(false)
	t.Run("point read refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := strict.GetOperation(ctx, "sub", "op")
		requireRefused(t, err)
	})
	t.Run("query refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var errs []error
		for p, err := range strict.PendingOperations(ctx) {
			require.Empty(t, p.ID, "nothing is read over an unverified connection")
			errs = append(errs, err)
		}
		require.Len(t, errs, 1)
		requireRefused(t, errs[0])
	})
	t.Run("lock refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := strict.Locks().Create(ctx, "sub", "opstatus", 5*time.Second)
		requireRefused(t, err)
		_, ok, err := fe.TryLock(ctx, "sub", "frontend")
		require.NoError(t, err)
		require.True(t, ok, "the refused client created no lock item")
	})

	t.Run("accepted when verification is off", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		op, err := client(true).GetOperation(ctx, "sub", "op")
		require.NoError(t, err)
		require.Equal(t, "op", op.ID)
	})
}
