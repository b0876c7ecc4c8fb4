package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseCronNext(t *testing.T) {
	tests := []struct {
		name string
		expr string
		from string
		want []string // successive occurrences after from
	}{
		{name: "every 10 seconds", expr: "*/10 * * * * *", from: "2025-03-01T10:00:03Z",
			want: []string{"2025-03-01T10:00:10Z", "2025-03-01T10:00:20Z", "2025-03-01T10:00:30Z"}},
		{name: "strictly after", expr: "*/10 * * * * *", from: "2025-03-01T10:00:10Z",
			want: []string{"2025-03-01T10:00:20Z"}},
		{name: "every second", expr: "*/1 * * * * *", from: "2025-03-01T10:00:59.5Z",
			want: []string{"2025-03-01T10:01:00Z", "2025-03-01T10:01:01Z"}},
		{name: "every 5 minutes", expr: "0 */5 * * * *", from: "2025-03-01T10:03:00Z",
			want: []string{"2025-03-01T10:05:00Z", "2025-03-01T10:10:00Z"}},
		{name: "list", expr: "5,15,45 * * * * *", from: "2025-03-01T10:00:20Z",
			want: []string{"2025-03-01T10:00:45Z", "2025-03-01T10:01:05Z"}},
		{name: "range with step", expr: "0 0 9-17/4 * * *", from: "2025-03-01T10:00:00Z",
			want: []string{"2025-03-01T13:00:00Z", "2025-03-01T17:00:00Z", "2025-03-02T09:00:00Z"}},
		{name: "value with step runs to the maximum", expr: "50/5 * * * * *", from: "2025-03-01T10:00:00Z",
			want: []string{"2025-03-01T10:00:50Z", "2025-03-01T10:00:55Z", "2025-03-01T10:01:50Z"}},
		{name: "daily at 9:30", expr: "0 30 9 * * *", from: "2025-03-01T10:00:00Z",
			want: []string{"2025-03-02T09:30:00Z"}},
		{name: "weekdays only", expr: "0 0 12 * * 1-5", from: "2025-03-01T00:00:00Z", // a Saturday
			want: []string{"2025-03-03T12:00:00Z", "2025-03-04T12:00:00Z"}},
		{name: "day names", expr: "0 0 0 * * sun", from: "2025-03-01T00:00:00Z",
			want: []string{"2025-03-02T00:00:00Z", "2025-03-09T00:00:00Z"}},
		{name: "month names", expr: "0 0 0 1 Jan,JUL *", from: "2025-03-01T00:00:00Z",
			want: []string{"2025-07-01T00:00:00Z", "2026-01-01T00:00:00Z"}},
		{name: "day and weekday must both match", expr: "0 0 0 13 * 5", from: "2025-01-01T00:00:00Z",
			want: []string{"2025-06-13T00:00:00Z", "2026-02-13T00:00:00Z"}},
		{name: "leap day", expr: "0 0 0 29 2 *", from: "2025-01-01T00:00:00Z",
			want: []string{"2028-02-29T00:00:00Z"}},
		{name: "never", expr: "0 0 0 31 2 *", from: "2025-01-01T00:00:00Z",
			want: []string{"0001-01-01T00:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.expr)
			require.NoError(t, err)
			require.Equal(t, tt.expr, s.String())
			require.True(t, s.AdjustForDST())
			at := utc(tt.from)
			for _, w := range tt.want {
				at = s.Next(at)
				require.Equal(t, utc(w), at.UTC(), "after %s", tt.from)
			}
		})
	}
}

func TestParseCronErrors(t *testing.T) {
	tests := []struct {
		name, expr, wantErr string
	}{
		{name: "five fields", expr: "*/5 * * * *", wantErr: "want 6 fields"},
		{name: "seven fields", expr: "0 0 0 * * * 2025", wantErr: "want 6 fields"},
		{name: "second out of range", expr: "60 * * * * *", wantErr: "second field: 60 is outside 0-59"},
		{name: "hour out of range", expr: "0 0 24 * * *", wantErr: "hour field: 24 is outside 0-23"},
		{name: "day zero", expr: "0 0 0 0 * *", wantErr: "day field: 0 is outside 1-31"},
		{name: "weekday seven", expr: "0 0 0 * * 7", wantErr: "day-of-week field: 7 is outside 0-6"},
		{name: "bad step", expr: "*/0 * * * * *", wantErr: "bad step"},
		{name: "not a number", expr: "x * * * * *", wantErr: `"x" is not a number`},
		{name: "backwards range", expr: "0 0 5-1 * * *", wantErr: "runs backwards"},
		{name: "empty list item", expr: "1,,2 * * * * *", wantErr: "empty list item"},
		{name: "empty", expr: "", wantErr: "want 6 fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.expr)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestParseTimeSpanSchedule(t *testing.T) {
	tests := []struct {
		expr string
		want time.Duration
	}{
		{expr: "00:00:10", want: 10 * time.Second},
		{expr: "01:30", want: 90 * time.Minute},
		{expr: "1.02:00:00", want: 26 * time.Hour},
		{expr: "00:00:00.5", want: 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			s, err := Parse(tt.expr)
			require.NoError(t, err)
			require.False(t, s.AdjustForDST())
			from := utc("2025-03-01T10:00:00Z")
			require.Equal(t, from.Add(tt.want), s.Next(from))
		})
	}
	_, err := Parse("00:00:00")
	require.ErrorContains(t, err, "must be positive")
	_, err = Parse("25:00:00")
	require.Error(t, err, "an hour of 25 is neither a TimeSpan nor NCRONTAB")
}
