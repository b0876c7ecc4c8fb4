package loopback

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"LocalHost", true},
		{"127.0.0.1", true},
		{"127.1.2.3", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true},
		{"", false},
		{"0.0.0.0", false},
		{"::", false},
		{"0x7f.1", false},
		{"2130706433", false},
		{"127.1", false},
		{"localhost.example.com", false},
		{"10.0.0.4", false},
		{"169.254.169.254", false},
		{"fe80::1%lo", false},
		{"api.example.com", false},
	} {
		require.Equal(t, tc.want, Host(tc.host), tc.host)
	}
}
