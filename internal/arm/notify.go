package arm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// ErrPermanent marks a notification that will never succeed: a bad URI or a
// 4xx answer other than 408 and 429. Retrying it is pointless.
var ErrPermanent = errors.New("notification rejected")

// Notifier POSTs operation statuses to ARM notification URIs.
type Notifier struct {
	client    *http.Client
	allowHTTP bool
}

// NewNotifier returns a Notifier; allowHTTP lets plain-http URIs through (local
// runs only). It sends no credentials and follows no redirects.
func NewNotifier(allowHTTP bool) *Notifier {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	// Notifications go to a few ARM hosts, up to one per poll in flight:
	// keep those connections instead of net/http's default of 2 per host.
	transport.MaxIdleConnsPerHost = 64
	return &Notifier{
		allowHTTP: allowHTTP,
		client: &http.Client{
			Transport: transport,
			Timeout:   10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// CheckURI reports why uri cannot receive a notification, or nil.
func (n *Notifier) CheckURI(uri string) error {
	u, err := url.Parse(uri)
	switch {
	case err != nil:
		return fmt.Errorf("%w: notificationUri does not parse", ErrPermanent)
	case u.User != nil:
		return fmt.Errorf("%w: notificationUri carries credentials", ErrPermanent)
	case u.Host == "":
		return fmt.Errorf("%w: notificationUri has no host", ErrPermanent)
	case u.Scheme == "https", u.Scheme == "http" && n.allowHTTP:
		return nil
	}
	return fmt.Errorf("%w: notificationUri scheme %q is not allowed (https only unless NOTIFICATIONS_ALLOW_HTTP)", ErrPermanent, u.Scheme)
}

// Notify POSTs status as JSON to uri once. A nil error means a 2xx answer.
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
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "opstatus")
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
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
