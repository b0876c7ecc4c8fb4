package hostemu

import (
	"context"
	"time"
)

// timerRunner runs one timer-triggered function, modelled on the timer
// extension's TimerListener: one invocation at a time (its invocation
// lock); after an invocation, Next is the schedule's next occurrence after
// the time the invocation began (InvokeJobFunction), and the timer is armed
// only once the invocation has ended (HandleTimerEvent, StartTimer). So a
// run that overruns its interval is followed at once by the next
// (GetNextTimerInterval: a Next in the past is due in one tick), and the
// occurrences that passed in between are skipped.
type timerRunner struct {
	h  *Host
	in *Instance
	fn *Function
}

// scheduleStatus is the timer payload's ScheduleStatus.
type scheduleStatus struct {
	last, next, lastUpdated time.Time // zero Last/LastUpdated: never ran
}

// maxSkipCount bounds the counting of skipped occurrences.
const maxSkipCount = 100000

// run fires the timer until intake ends; invocations use work.
func (t *timerRunner) run(intake, work context.Context) {
	trig := t.fn.Timer
	loc := t.h.opts.Location
	now := time.Now().In(loc)
	status := scheduleStatus{next: trig.Schedule.Next(now)}
	startup := trig.RunOnStartup
	for {
		var invokedAt time.Time
		if startup {
			invokedAt = time.Now().In(loc)
		} else {
			if status.next.IsZero() {
				t.h.log.Warn("hostemu: the schedule has no next occurrence", "function", t.fn.Name, "schedule", trig.Schedule.String())
				<-intake.Done()
				return
			}
			timer := time.NewTimer(time.Until(status.next))
			select {
			case <-timer.C:
			case <-intake.Done():
				timer.Stop()
				return
			}
			invokedAt = time.Now().In(loc)
			// Occurrences after the one we run and up to now were missed
			// while the previous run went on.
			skipped := int64(0)
			for o := trig.Schedule.Next(status.next); !o.IsZero() && !o.After(invokedAt) && skipped < maxSkipCount; o = trig.Schedule.Next(o) {
				skipped++
			}
			t.h.stats.ticksSkip.Add(skipped)
		}
		if intake.Err() != nil {
			return
		}

		payload := map[string]any{
			"Schedule":       map[string]any{"AdjustForDST": trig.Schedule.AdjustForDST()},
			"ScheduleStatus": nil,
			"IsPastDue":      false,
		}
		// TimerListener passes ScheduleStatus only with a schedule monitor.
		if trig.UseMonitor {
			payload["ScheduleStatus"] = map[string]any{
				"Last":        dateTime(status.last),
				"Next":        dateTime(status.next),
				"LastUpdated": dateTime(status.lastUpdated),
			}
		}
		t.in.invoke(work, t.fn, map[string]any{trig.Binding: payload}, nil, 0)
		t.h.stats.ticksRun.Add(1)

		// A timer that fires a little early counts as on time
		// (TimerListener.InvokeJobFunction).
		adjusted := invokedAt
		if !startup && status.next.After(invokedAt) {
			adjusted = status.next
		}
		status = scheduleStatus{last: adjusted, next: trig.Schedule.Next(adjusted), lastUpdated: adjusted}
		startup = false
	}
}

// dateTime writes a DateTime the way the host's payload carries it.
func dateTime(t time.Time) string {
	if t.IsZero() {
		return dateTimeMin
	}
	return t.Format(layoutDateTime)
}

// runSingleton runs the timer while the instance holds the function's
// lease, as the SingletonListener the timer listener is wrapped in
// ([Singleton(Mode = SingletonMode.Listener)] on TimerListener): one
// attempt to take the lease at start, then one every TimerLeaseRetry
// until one succeeds (SingletonListener.StartAsync and its recovery
// timer, ListenerLockRecoveryPollingInterval). The holder renews the lease
// halfway through its period (SingletonManager.CreateLeaseRenewalTimer)
// and releases it only when its listener stops (SingletonListener.
// StopAsync), so a crashed holder keeps it until it expires.
func (t *timerRunner) runSingleton(intake, work context.Context) {
	f := t.h.opts.Flex
	lease := t.h.leaseOf(t.fn.Name)
	log := t.h.log.With("function", t.fn.Name, "instance", t.in.index)
	if !lease.tryAcquire(t.in.index, time.Now(), f.TimerLease) {
		log.Debug("hostemu: the timer's lease is held by another instance; retrying", "retry", f.TimerLeaseRetry)
		retry := time.NewTicker(f.TimerLeaseRetry)
		for acquired := false; !acquired; {
			select {
			case <-intake.Done():
				retry.Stop()
				return
			case <-retry.C:
			}
			acquired = lease.tryAcquire(t.in.index, time.Now(), f.TimerLease)
		}
		retry.Stop()
	}
	log.Info("hostemu: the timer's lease is acquired")

	renewing, stopRenewing := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(f.TimerLease / 2)
		defer tick.Stop()
		for {
			select {
			case <-renewing.Done():
				return
			case <-t.in.crash:
				return
			case <-tick.C:
			}
			if !lease.renew(t.in.index, time.Now(), f.TimerLease) {
				log.Warn("hostemu: renewing the timer's lease failed")
			}
		}
	}()
	t.run(intake, work)
	stopRenewing()
	<-renewed
	if !t.in.crashed() {
		lease.release(t.in.index)
		log.Info("hostemu: the timer's lease is released")
	}
}
