package clusterservice

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorReasonIsBounded: Cluster Service's error code and reason are cut
// as its other strings are, since the error is logged per operation per
// scan and recorded on spans; a reply may hold up to MaxReplyBytes.
func TestErrorReasonIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name, body string
	}{
		{"reason", `{"kind":"Error","code":"CLUSTERS-MGMT-500","reason":"` + strings.Repeat("r", 512<<10) + `"}`},
		{"code", `{"kind":"Error","code":"` + strings.Repeat("c", 512<<10) + `","reason":"boom"}`},
		{"multibyte reason", `{"kind":"Error","code":"X","reason":"` + strings.Repeat("é", 256<<10) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(replyJSON(500, tc.body))
			defer srv.Close()
			_, err := newClient(t, Config{URL: srv.URL}).Status(context.Background(), hcpCluster)
			require.Error(t, err)
			require.True(t, IsTransient(err))
			require.Contains(t, err.Error(), "HTTP 500 Internal Server Error: ")
			require.LessOrEqual(t, len(err.Error()), maxCodeBytes+maxMessageBytes+200, "error of %d bytes", len(err.Error()))
			require.Contains(t, err.Error(), "…")
		})
	}
}
