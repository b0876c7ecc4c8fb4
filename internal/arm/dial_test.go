package arm

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNotifierDialsNoInternalAddress goes around CheckURI, as a name of a
// notification host that resolves to an internal address does: the
// transport refuses the address before connecting, and a listener on
// 127.0.0.1 hears nothing.
func TestNotifierDialsNoInternalAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
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
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	n := NewNotifier(false)
	for _, host := range []string{"127.0.0.1", "localhost", "::ffff:127.0.0.1", "0.0.0.0"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+net.JoinHostPort(host, port)+"/notify", nil)
		require.NoError(t, err)
		_, err = n.client.Do(req)
		require.ErrorContains(t, err, "not a public address", host)
	}
	require.Zero(t, accepted.Load(), "a TLS handshake reached the listener")

	// Locally the same receiver is reached.
	_, err = NewNotifier(true).client.Post("http://127.0.0.1:"+port+"/notify", "application/json", nil)
	require.Error(t, err) // the listener closes at once
	require.Positive(t, accepted.Load())
}

func TestCheckAddress(t *testing.T) {
	for _, tc := range []struct {
		addr          string
		allowLoopback bool
		public        bool
	}{
		{"20.190.151.68:443", false, true}, // one of management.azure.com's
		{"[2603:1030:400::1]:443", false, true},
		{"127.0.0.1:443", false, false},
		{"127.0.0.1:443", true, true},
		{"[::1]:443", false, false},
		{"[::1]:443", true, true},
		{"[::ffff:127.0.0.1]:443", false, false},
		{"[::ffff:a9fe:a9fe]:443", true, false},
		{"169.254.169.254:443", true, false},
		{"[fe80::1]:443", false, false},
		{"10.0.0.4:443", true, false},
		{"172.16.0.1:443", false, false},
		{"192.168.0.1:443", false, false},
		{"[fd00::1]:443", false, false},
		{"100.64.0.1:443", false, false},
		{"168.63.129.16:443", false, false},
		{"0.0.0.0:443", true, false},
		{"0.1.2.3:443", false, false},
		{"[::]:443", false, false},
		{"[::a00:4]:443", false, false},
		{"[64:ff9b::a00:4]:443", false, false},
		{"[2002:a00:4::]:443", false, false},
		{"224.0.0.1:443", false, false},
		{"255.255.255.255:443", false, false},
	} {
		err := checkAddress(tc.addr, tc.allowLoopback)
		if tc.public {
			require.NoError(t, err, tc.addr)
		} else {
			require.Error(t, err, tc.addr)
		}
	}
}
