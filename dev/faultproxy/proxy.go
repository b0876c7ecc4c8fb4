package faultproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Proxy.
type Options struct {
	// TLS serves https with a self-signed certificate generated at start
	// (clients must skip verification or trust Proxy.Certificate); plain
	// HTTP otherwise.
	TLS bool
	// Seed seeds the random source that decides faults. The same seed and
	// the same sequence of selected requests give the same faults.
	Seed int64
	// Logger receives fault and error records; nil discards them.
	Logger *slog.Logger
	// Name labels this proxy's writes (Write.Source), to tell proxies apart
	// when a test merges the logs of several.
	Name string
}

// Limits.
const (
	// maxRequestBody is far above Cosmos DB's 2 MB item limit.
	maxRequestBody = 32 << 20
	// maxAccountBody bounds the account read that the proxy rewrites.
	maxAccountBody = 1 << 20
	// shutdownGrace is how long Close lets forwarded requests finish, so
	// that their writes reach the log.
	shutdownGrace = 5 * time.Second
)

// Proxy is a fault-injecting reverse proxy in front of one Cosmos DB
// endpoint. Its methods are safe for concurrent use.
type Proxy struct {
	upstream  *url.URL
	opts      Options
	log       *slog.Logger
	transport *http.Transport
	cert      *tls.Certificate

	faults  atomic.Pointer[Faults]
	rngMu   sync.Mutex
	rng     *rand.Rand
	delayMu sync.Mutex
	delays  []*delayRule

	seq     atomic.Int64
	writeMu sync.Mutex
	writes  []Write
	stats   stats

	// closing ends holds when Close begins; forwardCtx ends forwarded
	// requests once the shutdown grace has passed.
	closing       context.Context
	stopClosing   context.CancelFunc
	forwardCtx    context.Context
	stopForwarded context.CancelFunc

	mu      sync.Mutex
	srv     *http.Server
	url     string
	started bool
	closed  bool
	served  chan error
}

// New returns a proxy for the Cosmos DB endpoint upstream (an http or https
// URL; only its scheme and host are used). Call Start to serve.
func New(upstream string, opts Options) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: parsing upstream %q: %w", upstream, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q is not an http or https URL", upstream)
	}
	p := &Proxy{
		upstream: &url.URL{Scheme: u.Scheme, Host: u.Host},
		opts:     opts,
		log:      opts.Logger,
		rng:      rand.New(rand.NewPCG(uint64(opts.Seed), 0x6661756c7470)), //nolint:gosec // test faults, not secrets
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("component", "faultproxy")
	if opts.Name != "" {
		p.log = p.log.With("proxy", opts.Name)
	}
	p.closing, p.stopClosing = context.WithCancel(context.Background())
	p.forwardCtx, p.stopForwarded = context.WithCancel(context.Background())

	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	p.transport = &http.Transport{
		Proxy: nil, // never an environment proxy: the upstream is on loopback
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				p.stats.upstreamConns.Add(1)
			}
			return conn, err
		},
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the upstream is a local test server with a self-signed certificate
		ForceAttemptHTTP2:     false,
		DisableCompression:    true, // pass Accept-Encoding and bodies through untouched
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second, // below the test server's 120 s keep-alive
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // a slow upstream is part of what tests explore
	}
	if opts.TLS {
		cert, err := selfSignedCert()
		if err != nil {
			return nil, fmt.Errorf("faultproxy: %w", err)
		}
		p.cert = &cert
	}
	return p, nil
}

// Start listens on a free port of 127.0.0.1 and serves in the background.
func (p *Proxy) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return errors.New("faultproxy: Start called twice or after Close")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("faultproxy: listening: %w", err)
	}
	scheme := "http"
	if p.cert != nil {
		scheme = "https"
		ln = tls.NewListener(ln, &tls.Config{
			Certificates: []tls.Certificate{*p.cert},
			NextProtos:   []string{"http/1.1"}, // hijacking needs HTTP/1.1
			MinVersion:   tls.VersionTLS12,
		})
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second, // outlive the Go client's 90 s idle timeout
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateNew {
				p.stats.clientConns.Add(1)
			}
		},
	}
	p.url = fmt.Sprintf("%s://%s/", scheme, ln.Addr().String())
	p.started = true
	p.served = make(chan error, 1)
	go func() { p.served <- p.srv.Serve(ln) }()
	p.log.Info("listening", "url", p.url, "upstream", p.upstream.String())
	return nil
}

// URL returns the proxy's endpoint, e.g. "https://127.0.0.1:41234/", once
// started.
func (p *Proxy) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.url
}

// Certificate returns the proxy's self-signed certificate, or nil for
// plain HTTP.
func (p *Proxy) Certificate() *x509.Certificate {
	if p.cert == nil {
		return nil
	}
	return p.cert.Leaf
}

// Close stops the proxy. Held requests (delays, timeouts) are dropped at
// once; forwarded requests get a few seconds to finish so that their writes
// reach the log. The write log and the stats stay readable.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	srv, started := p.srv, p.started
	p.mu.Unlock()

	p.stopClosing()
	defer p.transport.CloseIdleConnections()
	defer p.stopForwarded()
	if !started {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serveErr := <-p.served; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("faultproxy: closing: %w", err)
	}
	return nil
}

// ServeHTTP handles one client request: delays, faults, then forwarding.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.stats.requests.Add(1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			cosmosError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", "request body too large for faultproxy")
			return
		}
		panic(http.ErrAbortHandler) // the client went away mid-body
	}
	req := parseRequest(r, body)

	f := p.faults.Load()
	selected := f != nil && (f.Match == nil || f.Match(req))
	delay := p.delayFor(req)
	if selected {
		delay += f.Latency
	}
	if delay > 0 {
		p.stats.delayed.Add(1)
		if p.hold(r.Context(), delay) != holdElapsed {
			drop(w) // the client is gone, or the proxy is closing
			return
		}
	}

	flt := faultNone
	if selected {
		flt = p.pick(f)
	}
	if flt != faultNone {
		p.log.Debug("fault", "fault", flt.String(), "request", req.String())
	}
	switch flt {
	case fault429:
		p.stats.throttled.Add(1)
		throttle(w, f.RetryAfter)
		return
	case fault503:
		p.stats.unavailable.Add(1)
		cosmosError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "Service is currently unavailable.")
		return
	case faultTimeout:
		p.stats.timedOut.Add(1)
		if p.hold(r.Context(), f.Timeout) != holdElapsed {
			drop(w) // the client is gone, or the proxy is closing
			return
		}
		cosmosError(w, http.StatusRequestTimeout, "RequestTimeout", "Request timed out.")
		return
	case faultDrop:
		p.stats.dropped.Add(1)
		drop(w)
		return
	}
	p.forward(w, r, req, body, flt == faultDropAfterForward)
}

// forward sends the request upstream and relays the answer, or drops the
// connection instead when dropAfter is set. The upstream request does not
// follow the client's cancellation: a write the upstream received is
// completed and logged even if the client has gone.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, req Request, body []byte, dropAfter bool) {
	ctx, cancel := context.WithCancel(p.forwardCtx)
	defer cancel()
	target := &url.URL{
		Scheme:   p.upstream.Scheme,
		Host:     p.upstream.Host,
		Path:     r.URL.Path,
		RawPath:  r.URL.RawPath,
		RawQuery: r.URL.RawQuery,
	}
	var reqBody io.Reader = http.NoBody
	if len(body) > 0 {
		reqBody = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), reqBody)
	if err != nil {
		cosmosError(w, http.StatusBadGateway, "BadGateway", "faultproxy could not build the upstream request")
		return
	}
	copyHeader(out.Header, r.Header)
	if _, ok := r.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // send none rather than Go's default
	}

	seq := p.seq.Add(1)
	p.stats.forwarded.Add(1)
	start := time.Now()
	resp, err := p.transport.RoundTrip(out)
	end := time.Now()
	if err != nil {
		p.stats.upstreamErrors.Add(1)
		p.log.Warn("upstream failed", "request", req.String(), "error", err)
		if dropAfter {
			p.stats.droppedAF.Add(1)
			drop(w)
			return
		}
		cosmosError(w, http.StatusBadGateway, "BadGateway", "the upstream did not answer")
		return
	}
	defer resp.Body.Close()

	logged := req.IsWrite && resp.StatusCode/100 == 2
	// newWrite describes this write for the log, given the answer's body.
	newWrite := func(answer []byte, delivered bool) Write {
		wr := Write{
			Seq:          seq,
			Start:        start,
			End:          end,
			Kind:         req.Kind,
			Database:     req.Database,
			Container:    req.Container,
			PartitionKey: req.PartitionKey,
			ItemID:       req.ItemID,
			Status:       resp.StatusCode,
			ETag:         resp.Header.Get("Etag"),
			IfMatch:      r.Header.Get("If-Match"),
			UserAgent:    r.Header.Get("User-Agent"),
			Owner:        r.Header.Get(HeaderOwner),
			Source:       p.opts.Name,
			Delivered:    delivered,
		}
		if req.Kind != KindDelete {
			wr.Body, wr.BodyTruncated = keepJSON(body)
		}
		wr.ResponseBody, wr.ResponseTruncated = keepJSON(answer)
		return wr
	}

	switch {
	case dropAfter:
		// Read the whole answer first: the upstream is done when the
		// client's connection breaks.
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
		if logged {
			p.logWrite(newWrite(answer, false))
		}
		p.stats.droppedAF.Add(1)
		drop(w)
	case logged:
		// Log before answering, so that a client that got its answer
		// finds its write in the log.
		answer, readErr := io.ReadAll(io.LimitReader(resp.Body, maxRequestBody))
		p.logWrite(newWrite(answer, readErr == nil))
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, err := w.Write(answer)
		if err == nil {
			err = http.NewResponseController(w).Flush()
		}
		if readErr != nil || err != nil || r.Context().Err() != nil {
			p.markUndelivered(seq)
		}
	case req.Kind == KindMeta && r.Method == http.MethodGet && len(pathSegments(r.URL)) == 0 && resp.StatusCode == http.StatusOK:
		p.relayAccount(w, resp)
	default:
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
}

// relayAccount relays the account read with its locations pointing at the
// proxy, so that a client that routes by them keeps using the proxy.
func (p *Proxy) relayAccount(w http.ResponseWriter, resp *http.Response) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAccountBody))
	if err == nil {
		raw = p.rewriteAccount(raw)
	}
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.Header().Del("Content-Encoding") // only identity bodies parse; others pass as read
	if err != nil {
		cosmosError(w, http.StatusBadGateway, "BadGateway", "the upstream's account read failed")
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(raw)
}

// rewriteAccount points the databaseAccountEndpoint of every location in an
// account document at the proxy; anything it cannot parse passes unchanged.
func (p *Proxy) rewriteAccount(raw []byte) []byte {
	var account map[string]any
	if json.Unmarshal(raw, &account) != nil {
		return raw
	}
	endpoint := p.URL()
	for _, key := range []string{"writableLocations", "readableLocations"} {
		locations, _ := account[key].([]any)
		for _, l := range locations {
			if loc, ok := l.(map[string]any); ok {
				loc["databaseAccountEndpoint"] = endpoint
			}
		}
	}
	out, err := json.Marshal(account)
	if err != nil {
		return raw
	}
	return out
}

// hopHeaders are per-connection headers a proxy must not forward.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// copyHeader copies src into dst without hop-by-hop headers.
func copyHeader(dst, src http.Header) {
	skip := map[string]bool{}
	for _, h := range hopHeaders {
		skip[h] = true
	}
	for _, v := range src.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			skip[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
		}
	}
	for k, vs := range src {
		if skip[http.CanonicalHeaderKey(k)] {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}
