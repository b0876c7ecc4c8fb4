package databasetesting

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/database"
)

// TestHookSeesEachCallByItsOp: every call runs the hook once with its own
// Op before it does anything, and the hook's error fails the call, named
// by the Op.
func TestHookSeesEachCallByItsOp(t *testing.T) {
	ctx := context.Background()
	const sub = "00000000-0000-0000-0000-000000000001"
	for _, tc := range []struct {
		op   Op
		call func(m *MemoryClient) error
	}{
		{OpPendingOperations, func(m *MemoryClient) error {
			for _, err := range m.PendingOperations(ctx) {
				return err
			}
			return nil
		}},
		{OpGetOperation, func(m *MemoryClient) error { _, err := m.GetOperation(ctx, sub, "op"); return err }},
		{OpReplaceOperation, func(m *MemoryClient) error {
			_, err := m.ReplaceOperation(ctx, &database.Operation{ID: "op", PartitionKey: sub, ETag: "e"})
			return err
		}},
		{OpGetResource, func(m *MemoryClient) error { _, err := m.GetResource(ctx, sub, "key"); return err }},
		{OpResourceHeads, func(m *MemoryClient) error { _, err := m.ResourceHeads(ctx, sub, "key"); return err }},
		{OpChildResources, func(m *MemoryClient) error { _, err := m.ChildResources(ctx, sub, "key"); return err }},
		{OpReplaceResource, func(m *MemoryClient) error {
			_, err := m.ReplaceResource(ctx, &database.Resource{ID: "r", PartitionKey: sub, ETag: "e"})
			return err
		}},
		{OpDeleteResource, func(m *MemoryClient) error {
			return m.DeleteResource(ctx, database.ResourceRef{ID: "r", PartitionKey: sub, ETag: "e"})
		}},
		{OpCreateBilling, func(m *MemoryClient) error { _, err := m.CreateBilling(ctx, &database.Billing{ID: "b"}); return err }},
		{OpOpenBilling, func(m *MemoryClient) error { _, err := m.OpenBilling(ctx, sub, "/subscriptions/x"); return err }},
		{OpReplaceBilling, func(m *MemoryClient) error {
			_, err := m.ReplaceBilling(ctx, &database.Billing{ID: "b", SubscriptionID: sub, ETag: "e"})
			return err
		}},
		{OpLockTTL, func(m *MemoryClient) error { _, err := m.Locks().TTL(ctx); return err }},
		{OpLockCreate, func(m *MemoryClient) error { _, err := m.Locks().Create(ctx, sub, "owner", time.Minute); return err }},
		{OpLockRenew, func(m *MemoryClient) error {
			_, err := m.Locks().Renew(ctx, sub, "owner", time.Minute, "e")
			return err
		}},
		{OpLockGet, func(m *MemoryClient) error { _, _, err := m.Locks().Get(ctx, sub); return err }},
		{OpLockDelete, func(m *MemoryClient) error { return m.Locks().Delete(ctx, sub, "e") }},
	} {
		t.Run(string(tc.op), func(t *testing.T) {
			m := NewMemoryClient(time.Minute)
			injected := errors.New("injected")
			var seen []Op
			m.Hook = func(op Op) error {
				seen = append(seen, op)
				return injected
			}
			err := tc.call(m)
			require.ErrorIs(t, err, injected)
			require.ErrorContains(t, err, string(tc.op)+": injected")
			require.Equal(t, []Op{tc.op}, seen)
		})
	}
}
