package clusterservice

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/testca"
	"github.com/opstatus/opstatus/internal/testenv"
)

// fakeCredential hands out token-1, token-2, … living lifetime from now,
// or fails with err; it records the scopes asked for.
type fakeCredential struct {
	mu       sync.Mutex
	now      func() time.Time
	lifetime time.Duration
	err      error
	calls    int
	scopes   [][]string
}

func (f *fakeCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.scopes = append(f.scopes, opts.Scopes)
	if f.err != nil {
		return azcore.AccessToken{}, f.err
	}
	return azcore.AccessToken{Token: fmt.Sprintf("token-%d", f.calls), ExpiresOn: f.now().Add(f.lifetime)}, nil
}

func (f *fakeCredential) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestManagedIdentityBearer: every request carries the credential's token
// for the audience, fetched once; without a token no request is sent.
func TestManagedIdentityBearer(t *testing.T) {
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	cred := &fakeCredential{now: time.Now, lifetime: time.Hour}
	logs := &testenv.SyncBuffer{}
	c := newClient(t, Config{URL: srv.URL, Credential: cred, Audience: "api://cluster-service", Logger: debugLogger(logs)})
	for _, id := range []InternalID{cmCluster, hcpCluster, hcpPool} {
		_, err := c.Status(context.Background(), id)
		require.NoError(t, err)
	}
	require.Equal(t, 1, cred.callCount())
	require.Equal(t, [][]string{{"api://cluster-service/.default"}}, cred.scopes)
	for _, r := range rec.seen() {
		require.Equal(t, "Bearer token-1", r.Header.Get("Authorization"))
	}
	requireNoSecrets(t, logs.String(), "token-1", "token-1", "no-client")

	failing := newClient(t, Config{URL: srv.URL, Audience: "api://cluster-service",
		Credential: &fakeCredential{now: time.Now, err: errors.New("no identity here")}})
	_, err := failing.Status(context.Background(), hcpCluster)
	require.ErrorContains(t, err, "managed identity token: no identity here")
	require.Len(t, rec.seen(), 3, "no request without a token")
}

func TestManagedIdentityConfig(t *testing.T) {
	cred := &fakeCredential{now: time.Now}
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"credential without audience", Config{URL: "https://cs", Credential: cred}, "Credential and Audience must be set together"},
		{"audience without credential", Config{URL: "https://cs", Audience: "api://cs"}, "Credential and Audience must be set together"},
		{"with client credentials", Config{URL: "https://cs", Credential: cred, Audience: "api://cs",
			ClientID: "id", ClientSecret: "pw", TokenURL: "https://login/token"}, "exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewClient(tc.cfg)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestCABundle: a server whose certificate a private CA issued is refused
// with the system's roots alone and trusted with the CA added; another
// CA's bundle does not turn verification off.
func TestCABundle(t *testing.T) {
	ca := testca.New(t, "gateway CA")
	rec := &recorder{reply: statusReplies()}
	srv := httptest.NewUnstartedServer(rec)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.ServerCert(t)}}
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		name string
		cas  []*x509.Certificate
		ok   bool
	}{
		{"system roots", nil, false},
		{"another CA", []*x509.Certificate{testca.New(t, "other CA").Cert}, false},
		{"the gateway's CA", []*x509.Certificate{ca.Cert}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(rec.seen())
			c := newClient(t, Config{URL: srv.URL, RootCAs: tc.cas})
			_, err := c.Status(context.Background(), hcpCluster)
			if tc.ok {
				require.NoError(t, err)
				require.Len(t, rec.seen(), before+1)
				return
			}
			require.ErrorContains(t, err, "certificate")
			require.False(t, IsTransient(err))
			require.Len(t, rec.seen(), before, "no request over an unverified connection")
		})
	}
}
