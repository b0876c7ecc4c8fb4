package scan

import (
	"log/slog"
	"sync"
	"time"

	"github.com/opstatus/opstatus/functions"
)

// reasonItem is scan's own reason for skipping an operation, beside
// pending's: the listed item does not decode.
const reasonItem = "item"

// skipLogEvery is how often one skipped operation is logged again: an
// operator sees it, without an error line every scan for ever.
const skipLogEvery = time.Hour

// maxSkipLogged bounds the operations remembered as logged; past it, the
// others of a scan are counted in one line instead.
const maxSkipLogged = 10000

// skipLog remembers which skipped operations were logged, and when.
type skipLog struct {
	mu     sync.Mutex
	logged map[string]time.Time
	// untold counts this scan's skips not logged one by one.
	untold int
}

// skip logs, at most once per skipLogEvery for key, why an operation was
// not sent.
func (f *Function) skip(inv *functions.Invocation, now time.Time, key, reason string, err error, attrs ...any) {
	l := &f.skipped
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logged == nil {
		l.logged = map[string]time.Time{}
	}
	if last, ok := l.logged[key]; ok && now.Sub(last) < skipLogEvery {
		return
	}
	if len(l.logged) >= maxSkipLogged {
		for k, at := range l.logged {
			if now.Sub(at) >= skipLogEvery {
				delete(l.logged, k)
			}
		}
	}
	if len(l.logged) >= maxSkipLogged {
		l.untold++
		return
	}
	l.logged[key] = now
	inv.Log.Error("operation skipped: poll could not act on it; logged again in an hour if it stays", append(attrs, "reason", reason, "error", err)...)
}

// untoldSkips logs, and forgets, how many skips of a scan were not logged
// one by one.
func (f *Function) untoldSkips(log *slog.Logger) {
	l := &f.skipped
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.untold > 0 {
		log.Error("more operations skipped than can be logged one by one", "operations", l.untold)
		l.untold = 0
	}
}
