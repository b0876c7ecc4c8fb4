// Package schedule reads timer schedules as the Azure Functions timer
// trigger does: six-field NCRONTAB expressions and TimeSpan intervals. The
// handler reads the scan schedule (SCAN_SCHEDULE, which scan/function.json
// names) to know when the next scan is due; the local host emulator fires
// the timer by it.
package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule tells when a timer trigger fires.
type Schedule interface {
	// Next returns the first occurrence strictly after t, in t's location,
	// or the zero time when there is none within five years.
	Next(t time.Time) time.Time
	// String returns the expression the schedule was parsed from.
	String() string
	// AdjustForDST is what the host reports in the timer payload's
	// Schedule object: true for NCRONTAB, false for TimeSpan schedules.
	AdjustForDST() bool
}

// Parse parses a timer schedule the way the Functions host does: a
// TimeSpan ("hh:mm:ss", "hh:mm" or "d.hh:mm:ss") is a constant interval,
// anything else must be a six-field NCRONTAB expression.
func Parse(expr string) (Schedule, error) {
	expr = strings.TrimSpace(expr)
	if d, ok := ParseTimeSpan(expr); ok {
		if d <= 0 {
			return nil, fmt.Errorf("schedule %q: the interval must be positive", expr)
		}
		return intervalSchedule{expr: expr, every: d}, nil
	}
	return ParseCron(expr)
}

// intervalSchedule is a TimeSpan schedule: every interval after the last
// occurrence.
type intervalSchedule struct {
	expr  string
	every time.Duration
}

func (s intervalSchedule) Next(t time.Time) time.Time { return t.Add(s.every) }
func (s intervalSchedule) String() string             { return s.expr }
func (s intervalSchedule) AdjustForDST() bool         { return false }

// CronSchedule is a six-field NCRONTAB expression:
// {second} {minute} {hour} {day} {month} {day-of-week}.
//
// Each field is "*", a value, a range "a-b", a step "*/n", "a-b/n" or
// "a/n", or a comma-separated list of those. Months and days of the week
// also take three-letter English names. Like NCrontab (and unlike Vixie
// cron), a time must match both the day-of-month and the day-of-week field.
type CronSchedule struct {
	expr                                            string
	seconds, minutes, hours, days, months, weekdays uint64
}

// cronField describes one NCRONTAB field.
type cronField struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i
}

var cronFields = [6]cronField{
	{name: "second", min: 0, max: 59},
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{name: "day-of-week", min: 0, max: 6, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

// ParseCron parses a six-field NCRONTAB expression.
func ParseCron(expr string) (*CronSchedule, error) {
	parts := strings.Fields(expr)
	if len(parts) != 6 {
		return nil, fmt.Errorf("schedule %q: want 6 fields (second minute hour day month day-of-week), got %d", expr, len(parts))
	}
	var sets [6]uint64
	for i, p := range parts {
		set, err := cronFields[i].parse(p)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", expr, err)
		}
		sets[i] = set
	}
	return &CronSchedule{
		expr:    expr,
		seconds: sets[0], minutes: sets[1], hours: sets[2],
		days: sets[3], months: sets[4], weekdays: sets[5],
	}, nil
}

// String returns the expression.
func (c *CronSchedule) String() string { return c.expr }

// AdjustForDST is true: the host's CronSchedule adjusts for daylight saving.
func (c *CronSchedule) AdjustForDST() bool { return true }

// Next returns the first matching second strictly after t, in t's location,
// or the zero time when none comes within five years.
func (c *CronSchedule) Next(t time.Time) time.Time {
	loc := t.Location()
	limit := t.AddDate(5, 0, 0)
	t = t.Truncate(time.Second).Add(time.Second)
	for !t.After(limit) {
		y, mo, d := t.Date()
		h, mi, s := t.Clock()
		prev := t
		switch {
		case c.months&(1<<uint(mo)) == 0:
			t = time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
		case c.days&(1<<uint(d)) == 0 || c.weekdays&(1<<uint(t.Weekday())) == 0:
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
		case c.hours&(1<<uint(h)) == 0:
			t = time.Date(y, mo, d, h+1, 0, 0, 0, loc)
		case c.minutes&(1<<uint(mi)) == 0:
			t = time.Date(y, mo, d, h, mi+1, 0, 0, loc)
		case c.seconds&(1<<uint(s)) == 0:
			t = time.Date(y, mo, d, h, mi, s+1, 0, loc)
		default:
			return t
		}
		// Around a daylight-saving fall-back, time.Date can pick the first of
		// two equal wall-clock times, which lies behind us.
		if !t.After(prev) {
			t = prev.Add(time.Second)
		}
	}
	return time.Time{}
}

// parse turns one field into a bit set of the values it allows.
func (f cronField) parse(field string) (uint64, error) {
	var set uint64
	for item := range strings.SplitSeq(field, ",") {
		if item == "" {
			return 0, fmt.Errorf("%s field %q: empty list item", f.name, field)
		}
		rangePart, stepPart, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepPart)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("%s field %q: bad step %q", f.name, field, stepPart)
			}
			step = n
		}
		lo, hi := f.min, f.max
		switch {
		case rangePart == "*":
		case strings.Contains(rangePart, "-"):
			a, b, _ := strings.Cut(rangePart, "-")
			var err error
			if lo, err = f.value(a); err != nil {
				return 0, err
			}
			if hi, err = f.value(b); err != nil {
				return 0, err
			}
			if lo > hi {
				return 0, fmt.Errorf("%s field %q: range %q runs backwards", f.name, field, rangePart)
			}
		default:
			v, err := f.value(rangePart)
			if err != nil {
				return 0, err
			}
			// "a/n" runs from a to the field's maximum; a lone value is
			// just itself.
			lo = v
			if !hasStep {
				hi = v
			}
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

// value parses one number or name of the field and checks its range.
func (f cronField) value(s string) (int, error) {
	if s == "" {
		return 0, errors.New(f.name + " field: empty value")
	}
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s field: %q is not a number", f.name, s)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%s field: %d is outside %d-%d", f.name, v, f.min, f.max)
	}
	return v, nil
}

// ParseTimeSpan parses the .NET TimeSpan forms a timer schedule (and
// host.json) uses:
// "hh:mm", "hh:mm:ss" and "d.hh:mm:ss" (fractions of a second allowed).
func ParseTimeSpan(s string) (time.Duration, bool) {
	if !strings.Contains(s, ":") || strings.ContainsAny(s, " \t*,/") {
		return 0, false
	}
	var days int
	rest := s
	if dayPart, after, ok := strings.Cut(s, "."); ok && !strings.Contains(dayPart, ":") {
		d, err := strconv.Atoi(dayPart)
		if err != nil || d < 0 {
			return 0, false
		}
		days, rest = d, after
	}
	parts := strings.Split(rest, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, false
	}
	h, err := strconv.Atoi(parts[0])
	if err != nil || h < 0 || h > 23 {
		return 0, false
	}
	m, err := strconv.Atoi(parts[1])
	if err != nil || m < 0 || m > 59 {
		return 0, false
	}
	var sec float64
	if len(parts) == 3 {
		sec, err = strconv.ParseFloat(parts[2], 64)
		if err != nil || sec < 0 || sec >= 60 {
			return 0, false
		}
	}
	d := time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute +
		time.Duration(sec*float64(time.Second))
	return d, true
}
