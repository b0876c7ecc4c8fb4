package arm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/internal/loopback"
)

// ErrPermanent marks a notification that will never succeed: a bad URI or a
// 4xx answer other than 408 and 429. Retrying it is pointless.
var ErrPermanent = errors.New("notification rejected")

// DefaultNotificationHosts are the hosts a notificationUri may name when
// no others are given: ARM's, of Azure's public and US Government clouds,
// the only ones ARO-HCP's frontend takes an Azure-AsyncNotificationUri on.
// Each admits its subdomains too.
var DefaultNotificationHosts = []string{"management.azure.com", "management.usgovcloudapi.net"}

// maxReplyHeaderBytes bounds the headers of a notification's reply: ARM's
// are a few hundred bytes, and up to one delivery per poll in flight holds
// them at once (net/http's default allows 10 MiB each).
const maxReplyHeaderBytes = 64 << 10

// Notifier POSTs operation statuses to ARM notification URIs.
type Notifier struct {
	client    *http.Client
	allowHTTP bool
	hosts     []string
}

// NewNotifier returns a Notifier for notificationUris of hosts (host names
// or their parents; DefaultNotificationHosts when none are given), https on
// port 443, whose addresses are public. allowHTTP (local runs only) admits
// besides a loopback receiver, over http or https on any port. It sends no
// credentials and follows no redirects.
func NewNotifier(allowHTTP bool, hosts ...string) *Notifier {
	if len(hosts) == 0 {
		hosts = DefaultNotificationHosts
	}
	n := &Notifier{allowHTTP: allowHTTP}
	for _, h := range hosts {
		n.hosts = append(n.hosts, strings.ToLower(h))
	}
	// The address is checked as it is dialled, after name resolution: a
	// name of an allowed host that resolves to an internal address (DNS
	// rebinding, a stale record) is refused too.
	dialer := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			return checkAddress(address, allowHTTP)
		},
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.DialContext = dialer.DialContext
	transport.MaxResponseHeaderBytes = maxReplyHeaderBytes
	// Notifications go to a few ARM hosts, up to one per poll in flight:
	// keep those connections instead of net/http's default of 2 per host.
	transport.MaxIdleConnsPerHost = 64
	n.client = &http.Client{
		Transport: transport,
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return n
}

// CheckURI reports why uri cannot receive a notification, or nil.
func (n *Notifier) CheckURI(uri string) error {
	u, err := url.Parse(uri)
	switch {
	case err != nil:
		return fmt.Errorf("%w: notificationUri does not parse", ErrPermanent)
	case u.User != nil:
		return fmt.Errorf("%w: notificationUri carries credentials", ErrPermanent)
	case u.Hostname() == "":
		// An empty host with a port (https://:8443/) dials this machine.
		return fmt.Errorf("%w: notificationUri has no host", ErrPermanent)
	case u.Scheme != "https" && !(u.Scheme == "http" && n.allowHTTP):
		return fmt.Errorf("%w: notificationUri scheme %.20q is not allowed (https only unless NOTIFICATIONS_ALLOW_HTTP)", ErrPermanent, u.Scheme)
	}
	host := strings.ToLower(u.Hostname())
	switch {
	case n.allowHTTP && loopback.Host(host):
		return nil
	case u.Scheme != "https":
		return fmt.Errorf("%w: notificationUri is plain http to %.80q (NOTIFICATIONS_ALLOW_HTTP admits it to a loopback receiver only)", ErrPermanent, host)
	case u.Port() != "" && u.Port() != "443":
		return fmt.Errorf("%w: notificationUri port %.20q is not 443", ErrPermanent, u.Port())
	case !n.allowed(host):
		return fmt.Errorf("%w: notificationUri host %.80q is not a notification host (NOTIFICATIONS_ALLOWED_HOSTS)", ErrPermanent, host)
	}
	return nil
}

// allowed reports whether host is one of the notification hosts or under
// one: a whole label matches, so evilmanagement.azure.com does not.
func (n *Notifier) allowed(host string) bool {
	for _, h := range n.hosts {
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

// nonPublic are ranges that IsGlobalUnicast and IsPrivate leave out but no
// notification may reach: each is internal or carries an IPv4 address
// inside an IPv6 one.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),        // this network: Linux dials 0.0.0.0 as this machine
	netip.MustParsePrefix("100.64.0.0/10"),    // shared address space (carrier-grade NAT)
	netip.MustParsePrefix("168.63.129.16/32"), // Azure's host endpoint (DNS, health probes, wire server)
	netip.MustParsePrefix("192.0.0.0/24"),     // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),    // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),      // reserved
	netip.MustParsePrefix("::/96"),            // IPv4-compatible
	netip.MustParsePrefix("64:ff9b::/96"),     // NAT64
	netip.MustParsePrefix("64:ff9b:1::/48"),   // local NAT64
	netip.MustParsePrefix("2001::/32"),        // Teredo
	netip.MustParsePrefix("2002::/16"),        // 6to4
}

// checkAddress refuses to dial an address that is not public: loopback,
// private, link-local (the instance metadata service), Azure's host
// endpoint and the like, however written. allowLoopback (local runs)
// admits loopback addresses.
func checkAddress(address string, allowLoopback bool) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("address %q does not parse", address)
	}
	a := ap.Addr().Unmap()
	if allowLoopback && a.IsLoopback() {
		return nil
	}
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return fmt.Errorf("address %s is not a public address", a)
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return fmt.Errorf("address %s is not a public address", a)
		}
	}
	return nil
}

// Notify POSTs status as JSON to uri once. A nil error means a 2xx answer.
// Its errors name the URI without its query, which signs it.
func (n *Notifier) Notify(ctx context.Context, uri string, status OperationStatus) error {
	if err := n.CheckURI(uri); err != nil {
		return err
	}
	body, err := json.Marshal(status)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, uri, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPermanent, redact(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "opstatus")
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("notify: %w", redact(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 &&
		resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return fmt.Errorf("%w: answered %d", ErrPermanent, resp.StatusCode)
	}
	return fmt.Errorf("notify: answered %d", resp.StatusCode)
}

// redact cuts the URL of a *url.Error in err to its scheme, host and path:
// net/http keeps the query, a notificationUri's signature, and errors reach
// logs and spans.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = schemeHostPath(ue.URL)
	}
	return err
}

func schemeHostPath(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(notificationUri)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
}
