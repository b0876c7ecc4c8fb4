// Command run is `make run`: it starts the local stack (Azurite, the Cosmos
// test server, the Cluster Service simulator, the Functions host emulator
// driving the built handler), writes demo operations as the frontend would,
// prints every transition opstatus writes, and ends with a summary once every
// operation is terminal. Ctrl-C stops everything it started.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/dev/stack"
)

func main() {
	keep := flag.Bool("keep-running", false, "keep the stack running after the demo converges, until Ctrl-C")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up when the demo has not converged by then")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Stdout, *keep, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, out io.Writer, keep bool, timeout time.Duration) (int, error) {
	started := time.Now()
	fmt.Fprintln(out, "starting Azurite, the Cosmos test server, the Cluster Service simulator and the host emulator…")
	outcomes := newOutcomes()
	s, err := stack.Start(ctx, stack.Options{Host: hostemu.Options{OnInvocation: outcomes.record}})
	if err != nil {
		return 1, err
	}
	defer func() {
		fmt.Fprintln(out, "stopping everything…")
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stop:", err)
		}
	}()
	fmt.Fprintf(out, "up in %s · handler and host logs: %s\n", time.Since(started).Round(time.Millisecond), s.LogPath)
	fmt.Fprintf(out, "  Cosmos %s · Cluster Service simulator %s · queue %s\n", s.Cosmos.Endpoint, s.SimURL, s.Azurite.QueueEndpoint)

	ops := demoOps()
	if err := seed(ctx, s, ops); err != nil {
		return 1, fmt.Errorf("seed: %w", err)
	}
	// One message no poll can read: it must end in the poison queue.
	if _, err := s.Queue.NewQueueClient("operations").EnqueueMessage(ctx,
		base64.StdEncoding.EncodeToString([]byte(`{"subscriptionId":"../etc","operationId":"x"}`)), nil); err != nil {
		return 1, fmt.Errorf("enqueue malformed message: %w", err)
	}
	// The frontend holds one subscription's lock for a while: opstatus must
	// wait for it and lose nothing.
	lockedSub := subscriptions[2]
	lock, ok, err := s.Frontend.TryLock(ctx, lockedSub, "frontend-demo")
	if err != nil || !ok {
		return 1, fmt.Errorf("frontend lock: %v", err)
	}
	unlockAt := time.Now().Add(8 * time.Second)
	fmt.Fprintf(out, "%d operations in %d subscriptions; the frontend holds the lock of %s for 8 s; one malformed message queued\n\n",
		len(ops), len(subscriptions), short(lockedSub))

	w := newWatcher(s, ops, out, started, outcomes)
	deadline := time.Now().Add(timeout)
	for !w.allTerminal() || !w.poisonSettled(ctx) {
		if lock.ETag != "" && time.Now().After(unlockAt) {
			if err := s.Frontend.Unlock(ctx, lock); err != nil {
				return 1, fmt.Errorf("frontend unlock: %w", err)
			}
			lock.ETag = ""
			w.event("frontend released the lock of " + short(lockedSub))
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "\ninterrupted")
			w.summary(ctx)
			return 130, nil
		case <-time.After(250 * time.Millisecond):
		}
		if err := w.poll(ctx); err != nil && ctx.Err() == nil {
			w.event("watch: " + err.Error())
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(out, "\nnot converged after %s\n", timeout)
			w.summary(ctx)
			return 1, errors.New("demo did not converge")
		}
	}
	ok = w.summary(ctx)
	if keep {
		fmt.Fprintln(out, "\n--keep-running: the stack stays up; Ctrl-C stops it")
		<-ctx.Done()
	}
	if !ok {
		return 1, errors.New("some operations ended in an unexpected state")
	}
	return 0, nil
}

// short abbreviates a subscription ID for the live view.
func short(sub string) string {
	if i := strings.IndexByte(sub, '-'); i > 0 {
		return sub[:i] + "…" + sub[len(sub)-4:]
	}
	return sub
}
