package functions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInvocationLogger(t *testing.T) {
	var process bytes.Buffer
	base := slog.New(slog.NewJSONHandler(&process, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := &collector{}
	log := invocationLogger(base, c, "inv-1", "poll")

	log.Info("first", "n", 1)
	log = log.With("subscription_id", "sub-1", "operation_id", "op-1")
	log.Warn("second", "text", "with spaces")
	log.WithGroup("cs").Error("third", "state", "ready")
	log.Debug("debug goes to the process log only")

	lines := c.Lines()
	require.Equal(t, []string{
		`level=INFO msg=first invocation_id=inv-1 function=poll n=1`,
		`level=WARN msg=second invocation_id=inv-1 function=poll subscription_id=sub-1 operation_id=op-1 text="with spaces"`,
		`level=ERROR msg=third invocation_id=inv-1 function=poll subscription_id=sub-1 operation_id=op-1 cs.state=ready`,
	}, lines)

	var records []map[string]any
	for line := range strings.Lines(process.String()) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		records = append(records, rec)
	}
	require.Len(t, records, 4)
	for _, rec := range records {
		require.Equal(t, "inv-1", rec["invocation_id"])
		require.Equal(t, "poll", rec["function"])
		require.Contains(t, rec, "time")
	}
	require.Equal(t, "sub-1", records[1]["subscription_id"])
	require.Equal(t, "op-1", records[2]["operation_id"])
	require.Equal(t, map[string]any{"state": "ready"}, records[2]["cs"])
}

func TestCollectorLimits(t *testing.T) {
	tests := []struct {
		name        string
		lines       int
		lineLen     int
		wantKept    int
		wantDropped int
	}{
		{name: "under the limits", lines: 10, lineLen: 10, wantKept: 10},
		{name: "too many lines", lines: maxLogLines + 5, lineLen: 10, wantKept: maxLogLines, wantDropped: 5},
		{name: "too many bytes", lines: 10, lineLen: maxLogBytes / 4, wantKept: 4, wantDropped: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collector{}
			for range tt.lines {
				_, err := c.Write([]byte(strings.Repeat("x", tt.lineLen) + "\n"))
				require.NoError(t, err)
			}
			lines := c.Lines()
			if tt.wantDropped == 0 {
				require.Len(t, lines, tt.wantKept)
				return
			}
			require.Len(t, lines, tt.wantKept+1)
			require.Contains(t, lines[len(lines)-1], fmt.Sprintf("%d more log lines", tt.wantDropped))
		})
	}
}

func TestCollectorLinesIsNeverNil(t *testing.T) {
	require.NotNil(t, (&collector{}).Lines())
}
