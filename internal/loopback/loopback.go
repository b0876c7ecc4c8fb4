// Package loopback tells whether a URL's host is this machine's loopback
// interface: the only place a credential may travel over plain http or to a
// peer whose certificate is not verified, since nothing between the two
// ends can read it.
package loopback

import (
	"net/netip"
	"strings"
)

// Host reports whether host (a URL's Hostname: no port, no brackets) is
// localhost or a loopback address: 127.0.0.0/8, ::1, or either written as
// an IPv4-mapped IPv6 address. Other spellings the resolver might take to
// loopback (0x7f.1, 0.0.0.0, an empty host) are not: what cannot be read
// plainly is refused.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Zone() == "" && addr.Unmap().IsLoopback()
}
