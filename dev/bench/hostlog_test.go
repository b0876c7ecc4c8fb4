package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The host's records per invocation follow host.json's log levels as the
// host filters categories.
func TestParseHostLogging(t *testing.T) {
	tests := []struct {
		name string
		json string
		want hostLogging
		err  string
	}{
		{name: "no logging section", json: `{}`, want: hostLogging{Timer: 3, Queue: 4}},
		{name: "default Information", json: `{"logging":{"logLevel":{"default":"Information"}}}`, want: hostLogging{Timer: 3, Queue: 4}},
		{name: "default Warning", json: `{"logging":{"logLevel":{"default":"Warning"}}}`, want: hostLogging{}},
		{name: "requests only", json: `{"logging":{"logLevel":{"default":"Warning","Host.Results":"Information"}}}`, want: hostLogging{Timer: 1, Queue: 1}},
		{name: "user lines do not bring the function's", json: `{"logging":{"logLevel":{"default":"Information","Function":"Warning","Function.poll.User":"Information"}}}`, want: hostLogging{Timer: 1, Queue: 1}},
		{name: "one function's lines", json: `{"logging":{"logLevel":{"Function":"Warning","Function.poll":"Information"}}}`, want: hostLogging{Timer: 1, Queue: 4}},
		{name: "case", json: `{"logging":{"logLevel":{"DEFAULT":"warning","host.results":"TRACE"}}}`, want: hostLogging{Timer: 1, Queue: 1}},
		{name: "unknown level", json: `{"logging":{"logLevel":{"default":"Loud"}}}`, err: "unknown level"},
		{name: "not JSON", json: `{`, err: "host.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseHostLogging([]byte(tt.json))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// The estimate prices the repository's host.json: the request of each
// invocation and nothing else from the host.
func TestTemplateLogsAsHostJSON(t *testing.T) {
	b, err := os.ReadFile("../../host.json")
	require.NoError(t, err)
	h, err := parseHostLogging(b)
	require.NoError(t, err)
	require.Equal(t, h, templateDeployment.Host)
	require.Equal(t, hostLogging{Timer: 1, Queue: 1}, h, "host.json keeps the requests and drops Executing, Executed and Trigger Details")
}
