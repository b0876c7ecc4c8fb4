package arm_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
)

// internalTargets are notificationUris of this machine, the instance
// metadata service, Azure's host endpoint and private networks, in the
// spellings that reach them.
var internalTargets = []string{
	"https://169.254.169.254/metadata/identity/oauth2/token",
	"https://[::ffff:a9fe:a9fe]/metadata/instance",
	"https://127.0.0.1:8081/notify",
	"https://127.0.0.1/notify",
	"https://localhost/notify",
	"https://[::1]/notify",
	"https://[::ffff:127.0.0.1]/notify",
	"https://10.0.0.4:10250/pods",
	"https://10.0.0.4/notify",
	"https://0x7f.1/notify",
	"https://2130706433/notify",
	"https://168.63.129.16/machine",
	"https://:8443/notify",
	"https://0.0.0.0/notify",
	"https://[::]/notify",
	"https://192.168.1.1/notify",
}

// TestCheckURIAdmitsOnlyTheNotificationHosts: in production a
// notificationUri is https on port 443 to ARM's hosts, whatever the
// Operations item says.
func TestCheckURIAdmitsOnlyTheNotificationHosts(t *testing.T) {
	n := arm.NewNotifier(false)
	for _, uri := range internalTargets {
		require.ErrorIs(t, n.CheckURI(uri), arm.ErrPermanent, uri)
	}
	for _, uri := range []string{
		"http://management.azure.com/subscriptions/s/notify",
		"https://management.azure.com:8443/subscriptions/s/notify",
		"https://management.azure.com.example.com/subscriptions/s/notify",
		"https://evilmanagement.azure.com/subscriptions/s/notify",
		"https://azure.com/subscriptions/s/notify",
		"https://notify.example.com/subscriptions/s/notify",
		"https://user:pw@management.azure.com/subscriptions/s/notify",
	} {
		require.ErrorIs(t, n.CheckURI(uri), arm.ErrPermanent, uri)
	}
	for _, uri := range []string{
		"https://management.azure.com/subscriptions/s/providers/Microsoft.RedHatOpenShift/hcpOperationStatuses/o?api-version=2020-01-01&sig=x",
		"https://management.azure.com:443/subscriptions/s/notify",
		"https://MANAGEMENT.azure.com/subscriptions/s/notify",
		"https://eastus.management.azure.com/subscriptions/s/notify",
		"https://management.usgovcloudapi.net/subscriptions/s/notify",
	} {
		require.NoError(t, n.CheckURI(uri), uri)
	}
}

// TestCheckURIWithOtherHosts: NOTIFICATIONS_ALLOWED_HOSTS replaces ARM's.
func TestCheckURIWithOtherHosts(t *testing.T) {
	n := arm.NewNotifier(false, "notify.example.test")
	require.NoError(t, n.CheckURI("https://notify.example.test/n"))
	require.NoError(t, n.CheckURI("https://a.notify.example.test/n"))
	require.ErrorIs(t, n.CheckURI("https://management.azure.com/n"), arm.ErrPermanent)
}

// TestCheckURILocally: NOTIFICATIONS_ALLOW_HTTP admits a loopback
// receiver, over http or https on any port, and nothing else internal.
func TestCheckURILocally(t *testing.T) {
	n := arm.NewNotifier(true)
	for _, uri := range []string{
		"http://127.0.0.1:8081/notify",
		"https://127.0.0.1:8443/notify",
		"http://localhost:7071/notify",
		"http://[::1]:8081/notify",
		"https://management.azure.com/subscriptions/s/notify",
	} {
		require.NoError(t, n.CheckURI(uri), uri)
	}
	for _, uri := range []string{
		"http://169.254.169.254/metadata/identity/oauth2/token",
		"http://10.0.0.4:10250/pods",
		"http://168.63.129.16/machine",
		"http://0.0.0.0:8081/notify",
		"http://:8081/notify",
		"http://management.azure.com/subscriptions/s/notify",
		"https://10.0.0.4/notify",
	} {
		require.ErrorIs(t, n.CheckURI(uri), arm.ErrPermanent, uri)
	}
}

// TestNotifyErrorCarriesNoQuery: a failed delivery's error, which poll
// logs and records on its span, names the URI without its query.
func TestNotifyErrorCarriesNoQuery(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	uri := "http://" + addr + "/subscriptions/s/notify?api-version=2020-01-01&sig=SECRET-SIGNATURE#frag"
	err = arm.NewNotifier(true).Notify(context.Background(), uri, arm.OperationStatus{Status: arm.ProvisioningStateSucceeded})
	require.Error(t, err)
	require.NotErrorIs(t, err, arm.ErrPermanent)
	require.NotContains(t, err.Error(), "SECRET-SIGNATURE")
	require.NotContains(t, err.Error(), "api-version")
	require.Contains(t, err.Error(), "http://"+addr+"/subscriptions/s/notify")
}

// TestNotifyBoundsReplyHeaders: a reply with oversized headers is a failed
// delivery, not megabytes held per delivery in flight.
func TestNotifyBoundsReplyHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", 1<<20))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	err := arm.NewNotifier(true).Notify(context.Background(), srv.URL+"/notify", arm.OperationStatus{Status: arm.ProvisioningStateSucceeded})
	require.ErrorContains(t, err, "header")
}

// TestNotifyDialsNoLoopbackInProduction: a notification host whose name
// resolves to this machine (DNS rebinding, a stale record) is not dialled:
// nothing reaches a listener on 127.0.0.1.
func TestNotifyDialsNoLoopbackInProduction(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:443")
	if err != nil {
		t.Skipf("needs to listen on 127.0.0.1:443: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	err = arm.NewNotifier(false, "localhost").Notify(context.Background(), "https://localhost/notify", arm.OperationStatus{Status: arm.ProvisioningStateSucceeded})
	require.ErrorContains(t, err, "not a public address")
	require.Zero(t, accepted.Load())
}
