package functions

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTimer(t *testing.T) {
	last := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		data    map[string]json.RawMessage
		want    TimerInfo
		wantErr string
	}{
		{
			name: "as the host sends it",
			data: timerData(`{"Schedule":{"AdjustForDST":true},"ScheduleStatus":{"Last":"2024-05-01T10:00:00+00:00","Next":"2024-05-01T10:00:10+00:00","LastUpdated":"2024-05-01T10:00:00.5+00:00"},"IsPastDue":false}`),
			want: TimerInfo{Last: last, Next: last.Add(10 * time.Second), LastUpdated: last.Add(500 * time.Millisecond)},
		},
		{
			name: "schedule status null",
			data: timerData(`{"Schedule":{"AdjustForDST":true},"ScheduleStatus":null,"IsPastDue":true}`),
			want: TimerInfo{IsPastDue: true},
		},
		{
			name: "schedule status missing",
			data: timerData(`{"IsPastDue":false}`),
		},
		{
			name: "last is the zero time without zone",
			data: timerData(`{"ScheduleStatus":{"Last":"0001-01-01T00:00:00","Next":"2024-05-01T10:00:10","LastUpdated":"0001-01-01T00:00:00"},"IsPastDue":false}`),
			want: TimerInfo{Next: last.Add(10 * time.Second)},
		},
		{
			name: "times with an offset become UTC",
			data: timerData(`{"ScheduleStatus":{"Last":"2024-05-01T12:00:00+02:00"}}`),
			want: TimerInfo{Last: last},
		},
		{
			name: "string holding JSON, past due as a string",
			data: timerData(quote(`{"ScheduleStatus":{"Last":"2024-05-01T10:00:00Z"},"IsPastDue":"True"}`)),
			want: TimerInfo{IsPastDue: true, Last: last},
		},
		{
			name: "unreadable fields are zero",
			data: timerData(`{"ScheduleStatus":{"Last":"soon","Next":7,"LastUpdated":null},"IsPastDue":"maybe"}`),
		},
		{
			name: "schedule status of the wrong type",
			data: timerData(`{"ScheduleStatus":[1],"IsPastDue":true}`),
			want: TimerInfo{IsPastDue: true},
		},
		{name: "missing binding", data: map[string]json.RawMessage{}, wantErr: `timer "timer": binding missing`},
		{name: "null", data: timerData(`null`), wantErr: "is null"},
		{name: "number", data: timerData(`1`), wantErr: "is a number"},
		{name: "broken JSON in a string", data: timerData(quote(`{"IsPastDue":`)), wantErr: "not a valid JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := (&Invocation{Data: tt.data}).Timer("timer")
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, http.StatusBadRequest, StatusOf(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func timerData(raw string) map[string]json.RawMessage {
	return map[string]json.RawMessage{"timer": json.RawMessage(raw)}
}
