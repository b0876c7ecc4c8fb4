package database_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/frontend"
	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/testenv"
)

// databaseWithOneOperation creates a database of the test's own with the
// frontend's schema and one pending operation "op" in subscription "sub".
func databaseWithOneOperation(t *testing.T) (string, *frontend.Frontend) {
	t.Helper()
	name, fe := newDatabase(t, 5*time.Second)
	require.NoError(t, fe.PutOperation(t.Context(), frontend.Operation{
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
	name, fe := databaseWithOneOperation(t)

	client := func(insecure bool) *database.CosmosClient {
		cfg := cosmosConfig(t, name)
		cfg.InsecureSkipVerify = insecure
		return newClient(t, cfg)
	}
	requireRefused := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		var verr *tls.CertificateVerificationError
		require.True(t, errors.As(err, &verr), "want a certificate verification error, got %v", err)
		require.NotContains(t, err.Error(), testenv.CosmosEmulatorKey)
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
