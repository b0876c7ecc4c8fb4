package pickup_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/config"
	"github.com/opstatus/opstatus/internal/queuemsg"
	"github.com/opstatus/opstatus/pickup"
)

// pickup/function.json is what the handler assumes of it: its binding is
// the one Handle reads; the settings it names are those by which the
// handler tells that the host runs pickup (config.PickupSettings), and its
// connection is the one config reads; a batch is at most one of scan's
// messages; the feed starts from now, not from the container's history.
func TestFunctionJSON(t *testing.T) {
	raw, err := os.ReadFile("function.json")
	require.NoError(t, err)
	var fj struct {
		Bindings []map[string]any `json:"bindings"`
	}
	require.NoError(t, json.Unmarshal(raw, &fj))
	require.Len(t, fj.Bindings, 1)
	b := fj.Bindings[0]
	require.Equal(t, "cosmosDBTrigger", b["type"])
	require.Equal(t, "in", b["direction"])
	require.Equal(t, pickup.Binding, b["name"])
	require.Equal(t, "COSMOS", b["connection"])

	var named []string
	for _, m := range regexp.MustCompile(`%([A-Za-z0-9_]+)%`).FindAllStringSubmatch(string(raw), -1) {
		named = append(named, m[1])
	}
	slices.Sort(named)
	want := slices.Clone(config.PickupSettings)
	slices.Sort(want)
	require.Equal(t, want, named)

	require.Equal(t, false, b["createLeaseContainerIfNotExists"], "a data-plane role cannot create containers")
	require.Equal(t, false, b["startFromBeginning"])
	require.EqualValues(t, queuemsg.BatchSize, b["maxItemsPerInvocation"])
	delay, ok := b["feedPollDelay"].(float64)
	require.True(t, ok)
	require.LessOrEqual(t, delay, 1000.0, "an operation is checked within 2 s of its write")
}
