package functions

import (
	"encoding/json"
	"fmt"
	"time"
)

// TimerInfo is a timer trigger's payload. Times are in UTC; a time the host
// did not give (ScheduleStatus null, or "0001-01-01T00:00:00") is zero.
type TimerInfo struct {
	IsPastDue   bool
	Last        time.Time
	Next        time.Time
	LastUpdated time.Time
}

// timerPayload is the shape the host sends:
// {"Schedule":{...},"ScheduleStatus":{"Last":...,"Next":...,"LastUpdated":...}|null,"IsPastDue":bool}.
// Fields stay raw so that each one is read leniently.
type timerPayload struct {
	ScheduleStatus json.RawMessage
	IsPastDue      json.RawMessage
}

type scheduleStatus struct {
	Last        json.RawMessage
	Next        json.RawMessage
	LastUpdated json.RawMessage
}

// Timer reads the timer trigger in Data[binding]. It fails only when the
// binding is missing or is not a JSON object (after the same unwrapping as
// QueueMessage); the errors answer 400. Fields inside that it cannot read
// are left zero, because the timer's bookkeeping never decides what a
// function does.
func (inv *Invocation) Timer(binding string) (TimerInfo, error) {
	raw, ok := lookup(inv.Data, binding)
	if !ok {
		return TimerInfo{}, BadRequest(fmt.Errorf("timer %q: binding missing from Data", binding))
	}
	obj, err := unwrapObject(raw)
	if err != nil {
		return TimerInfo{}, BadRequest(fmt.Errorf("timer %q: %w", binding, err))
	}
	var p timerPayload
	if err := json.Unmarshal(obj, &p); err != nil {
		return TimerInfo{}, BadRequest(fmt.Errorf("timer %q: %w", binding, err))
	}
	info := TimerInfo{IsPastDue: lenientBool(p.IsPastDue)}
	var st scheduleStatus
	if status, err := unwrapObject(p.ScheduleStatus); err == nil && json.Unmarshal(status, &st) == nil {
		info.Last = lenientTime(st.Last)
		info.Next = lenientTime(st.Next)
		info.LastUpdated = lenientTime(st.LastUpdated)
	}
	return info, nil
}
