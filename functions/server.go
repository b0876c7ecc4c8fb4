package functions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/opstatus/opstatus/internal/panics"
	"github.com/opstatus/opstatus/internal/telemetry"
)

// PortSetting is the environment variable in which the host gives the port
// to listen on.
const PortSetting = "FUNCTIONS_CUSTOMHANDLER_PORT"

// InvocationIDHeader is the request header carrying the invocation id.
const InvocationIDHeader = "X-Azure-Functions-InvocationId"

// Defaults for the options.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultDrainTimeout = 30 * time.Second
)

// Timeouts of the HTTP server. Invocations themselves are not bounded here:
// the host's functionTimeout bounds them, and a request whose caller goes
// away has its context canceled.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute // a body of at most a few MiB over loopback
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

// Handler runs one invocation. A nil error answers 200 with the result's
// outputs; an error answers StatusOf(err) and is logged at Error.
type Handler func(ctx context.Context, inv *Invocation) (*Result, error)

// Invocation is one call from the host.
type Invocation struct {
	// ID is the X-Azure-Functions-InvocationId header; it may be empty.
	ID string
	// Function is the function's name, the request path without its slash.
	Function string
	// Data holds the envelope's Data: trigger and input bindings by name.
	Data map[string]json.RawMessage
	// Metadata holds the envelope's Metadata: trigger metadata by name.
	Metadata map[string]json.RawMessage
	// Log is the invocation's log. Every record carries invocation_id and
	// function. Records below Warn go to the response's Logs, which the
	// host logs at Information with the invocation, or to the process log
	// if the invocation fails, since the host drops a failure's Logs.
	// Warn and Error records go to the process log only (stderr with
	// NewLogHandler), at once.
	Log *slog.Logger
}

// Result is what a successful invocation returns.
type Result struct {
	// Outputs holds output binding values by binding name; each must
	// encode as JSON.
	Outputs map[string]any
	// ReturnValue is the value of a $return binding, if any.
	ReturnValue any
}

// Server answers the host's invocations.
type Server struct {
	logger       *slog.Logger
	handlers     map[string]Handler
	maxBodyBytes int64
	drainTimeout time.Duration
	router       http.Handler
}

// Option configures a Server.
type Option func(*Server)

// WithMaxBodyBytes caps request bodies at n bytes (default 1 MiB); a larger
// body answers 413. n <= 0 keeps the default.
func WithMaxBodyBytes(n int64) Option {
	return func(s *Server) {
		if n > 0 {
			s.maxBodyBytes = n
		}
	}
}

// WithDrainTimeout sets how long Serve waits for in-flight invocations once
// its context is done (default 30 s). d <= 0 keeps the default.
func WithDrainTimeout(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.drainTimeout = d
		}
	}
}

// NewServer returns a server that routes POST /<name> to handlers[name].
// logger receives the process log (nil discards it, at Info); NewLogHandler
// writes it the way the host reads it. The records of an invocation that
// go to its Logs are those logger is enabled for. Names must be
// non-empty path segments and handlers non-nil; anything else is a
// programming error and panics.
func NewServer(logger *slog.Logger, handlers map[string]Handler, opts ...Option) *Server {
	if logger == nil {
		// Not slog.DiscardHandler, which enables no level: the Logs of an
		// invocation follow the process log's level.
		logger = slog.New(NewLogHandler(io.Discard, io.Discard, nil))
	}
	s := &Server{
		logger:       logger,
		handlers:     make(map[string]Handler, len(handlers)),
		maxBodyBytes: DefaultMaxBodyBytes,
		drainTimeout: DefaultDrainTimeout,
	}
	for _, opt := range opts {
		opt(s)
	}
	r := chi.NewRouter()
	r.Use(s.recoverer)
	r.Get("/", s.ready)
	for name, h := range handlers {
		if name == "" || strings.ContainsAny(name, "/{}*?#% ") {
			panic(fmt.Sprintf("functions: invalid function name %q", name))
		}
		if h == nil {
			panic(fmt.Sprintf("functions: nil handler for %q", name))
		}
		s.handlers[name] = h
		r.Post("/"+name, s.invoke(name, h))
	}
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed)
	s.router = r
	return s
}

// Handler returns the server's router: GET / answers 200 (the host's
// readiness probe) and POST /<function> runs an invocation.
func (s *Server) Handler() http.Handler { return s.router }

// Serve answers requests on ln until ctx is done. It then stops accepting,
// lets in-flight invocations finish for up to the drain timeout (their
// contexts are not canceled by ctx), closes what remains and returns. It
// returns nil after a complete drain.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.router,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		// Requests keep ctx's values but not its cancellation, so that
		// shutting down drains invocations instead of aborting them.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.logger.Info("serving", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-errc:
		return fmt.Errorf("functions: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}

	s.logger.Info("draining in-flight invocations", slog.Duration("timeout", s.drainTimeout))
	drainCtx, cancel := context.WithTimeout(context.Background(), s.drainTimeout)
	defer cancel()
	err := srv.Shutdown(drainCtx)
	if err != nil {
		// Closing the connections cancels the remaining invocations.
		_ = srv.Close()
		err = fmt.Errorf("functions: draining after %s: %w", s.drainTimeout, err)
	}
	<-errc // http.ErrServerClosed once Shutdown or Close has begun.
	if err != nil {
		s.logger.Error("stopped before in-flight invocations finished", slog.Any("error", err))
		return err
	}
	s.logger.Info("stopped")
	return nil
}

// ListenAddr returns the address to listen on for port, the value of
// FUNCTIONS_CUSTOMHANDLER_PORT: always on 127.0.0.1, the host's side of the
// loopback.
func ListenAddr(port string) (string, error) {
	if port == "" {
		return "", fmt.Errorf("%s is not set", PortSetting)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("%s=%q is not a port number (1-65535)", PortSetting, port)
	}
	return net.JoinHostPort("127.0.0.1", strconv.FormatUint(n, 10)), nil
}

// invoke returns the HTTP handler of one function.
func (s *Server) invoke(name string, h Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(InvocationIDHeader)
		ctx, span := telemetry.StartInvocation(r.Context(), r.Header, name, id)
		// A span the sampler left out is not recorded, but the work runs
		// under it all the same: its spans follow the decision instead of
		// starting traces of their own.
		if span.SpanContext().IsValid() {
			r = r.WithContext(ctx)
		}
		c, log := newInvocation(s.logger, id, name)
		// Unless the Logs went out in a whole 2xx answer, the host never
		// logs them: their records go to the process log instead. Deferred
		// too for a panic that ends this function early.
		delivered := false
		defer func() {
			if !delivered {
				c.replay(ctx)
			}
		}()

		status, body := s.run(w, r, name, id, h, log, c)
		err := body.writeTo(w, status)
		if err != nil {
			log.LogAttrs(ctx, slog.LevelError, "invocation answer not delivered",
				slog.Int("status", status), slog.String("error", err.Error()))
		}
		delivered = err == nil && status >= 200 && status < 300
		if !delivered {
			c.replay(ctx)
		}
		telemetry.EndInvocation(span, status)

		// One access line: at Debug for a success, which the host's request
		// record already shows, at Warn for a failure, whose cause is logged
		// at Error above.
		level, attrs := slog.LevelDebug, []slog.Attr{
			slog.String("invocation_id", id),
			slog.String("function", name),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if !delivered {
			level = slog.LevelWarn
			telemetry.InvocationFailed(ctx, name)
		}
		s.logger.LogAttrs(ctx, level, "invocation", attrs...)
	}
}

// run reads the envelope, calls the handler and prepares the answer.
func (s *Server) run(w http.ResponseWriter, r *http.Request, name, id string, h Handler, log *slog.Logger, c *collector) (int, *body) {
	fail := func(status int, err error) (int, *body) { return failed(r.Context(), log, status, err) }

	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return fail(http.StatusRequestEntityTooLarge,
				fmt.Errorf("request body is larger than %d bytes", s.maxBodyBytes))
		}
		return fail(http.StatusBadRequest, fmt.Errorf("reading request body: %w", err))
	}
	env, err := decodeEnvelope(raw)
	if err != nil {
		return fail(http.StatusBadRequest, err)
	}

	inv := &Invocation{ID: id, Function: name, Data: env.Data, Metadata: env.Metadata, Log: log}
	res, err := call(r.Context(), h, inv)
	if err != nil {
		return fail(StatusOf(err), err)
	}
	if res == nil {
		res = &Result{}
	}
	b, err := newBody(res.Outputs, c.Lines, res.ReturnValue)
	if err != nil {
		return fail(http.StatusInternalServerError, err)
	}
	return http.StatusOK, b
}

// failed logs why an invocation failed and returns the answer that says so.
// The reason is logged at Error, which reaches stderr: the host logs no Logs
// line of a failed invocation, so the answer's Logs stay empty.
func failed(ctx context.Context, log *slog.Logger, status int, err error) (int, *body) {
	log.LogAttrs(ctx, slog.LevelError, "invocation failed",
		slog.Int("status", status), slog.String("error", err.Error()))
	return status, &body{}
}

// call runs h, turning a panic into an error (logged with its stack) so that
// one bad invocation does not stop the process.
func call(ctx context.Context, h Handler, inv *Invocation) (res *Result, err error) {
	if p := panics.Recover(func() { res, err = h(ctx, inv) }); p != nil {
		p.Log(ctx, inv.Log, "handler panicked")
		return nil, fmt.Errorf("handler %w", p)
	}
	return res, err
}

// ready answers the host's readiness probe.
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	writeEmpty(w, http.StatusOK)
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.reject(w, r, http.StatusNotFound, "unknown function")
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	s.reject(w, r, http.StatusMethodNotAllowed, "method not allowed")
}

// reject answers a request that is not an invocation, logging why to the
// process log.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.logger.LogAttrs(r.Context(), slog.LevelWarn, msg,
		slog.String("invocation_id", r.Header.Get(InvocationIDHeader)),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
	)
	writeEmpty(w, status)
}

// recoverer turns a panic outside a handler into a 500 instead of a
// dropped connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logger.LogAttrs(r.Context(), slog.LevelError, "request panicked",
				slog.String("invocation_id", r.Header.Get(InvocationIDHeader)),
				slog.String("path", r.URL.Path),
				slog.String("panic", fmt.Sprint(v)),
				slog.String("stack", string(debug.Stack())))
			writeEmpty(w, http.StatusInternalServerError)
		}()
		next.ServeHTTP(w, r)
	})
}
