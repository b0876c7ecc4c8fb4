package hostemu

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeApp writes files (path relative to a new temp dir -> content) and
// returns the directory.
func writeApp(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

const minimalHostJSON = `{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"handler"}}}`

func TestLoadProjectApp(t *testing.T) {
	// The project's own host.json, scan/function.json and poll/function.json.
	h, err := Load("../..", map[string]string{"AzureWebJobsStorage": "UseDevelopmentStorage=true", "SCAN_SCHEDULE": "*/10 * * * * *"})
	require.NoError(t, err)

	cfg := h.Config()
	require.Equal(t, QueuesConfig{
		BatchSize:          8,
		NewBatchThreshold:  4,
		MaxDequeueCount:    5,
		VisibilityTimeout:  5 * time.Second,
		MaxPollingInterval: 500 * time.Millisecond,
		MessageEncoding:    EncodingBase64,
	}, cfg.Queues)
	require.Equal(t, 5*time.Minute, cfg.FunctionTimeout)
	require.Equal(t, "handler", cfg.Handler.ExecutablePath)
	require.Empty(t, cfg.Handler.Arguments)
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	require.Equal(t, root, cfg.Handler.WorkingDirectory)

	fns := h.Functions()
	require.Len(t, fns, 3)
	pickup, poll, scan := fns[0], fns[1], fns[2]

	// Without its settings pickup is in error and the others run, as a
	// stack that does not configure it needs.
	require.Equal(t, "pickup", pickup.Name)
	require.True(t, pickup.Disabled)
	require.ErrorContains(t, pickup.Error, "%COSMOS_DATABASE%")
	require.Nil(t, pickup.Cosmos)

	require.Equal(t, "poll", poll.Name)
	require.Nil(t, poll.Timer)
	require.NotNil(t, poll.Queue)
	require.Equal(t, "operation", poll.Queue.Binding)
	require.Equal(t, "operations", poll.Queue.QueueName)
	require.Equal(t, "AzureWebJobsStorage", poll.Queue.Connection)
	require.Equal(t, AzuriteConnectionString, poll.Queue.connectionString)
	require.Empty(t, poll.Outputs)

	require.Equal(t, "scan", scan.Name)
	require.Nil(t, scan.Queue)
	require.NotNil(t, scan.Timer)
	require.Equal(t, "timer", scan.Timer.Binding)
	require.Equal(t, "*/10 * * * * *", scan.Timer.Schedule.String())
	require.False(t, scan.Timer.RunOnStartup)
	require.False(t, scan.Timer.UseMonitor, "a 10 s schedule has no schedule monitor")
	require.Len(t, scan.Outputs, 1)
	require.Equal(t, "operations", scan.Outputs[0].Binding)
	require.Equal(t, "operations", scan.Outputs[0].QueueName)

	// With them, pickup runs on the feed at function.json's intervals.
	h, err = Load("../..", map[string]string{
		"AzureWebJobsStorage": "UseDevelopmentStorage=true", "SCAN_SCHEDULE": "*/10 * * * * *",
		"COSMOS_DATABASE": "opstatus", "COSMOS_OPERATIONS_CONTAINER": "Operations", "COSMOS_LEASES_CONTAINER": "Leases",
		"COSMOS": "AccountEndpoint=https://127.0.0.1:8081/;AccountKey=" + testCosmosKey + ";",
	})
	require.NoError(t, err)
	pickup = h.Functions()[0]
	require.False(t, pickup.Disabled)
	require.NoError(t, pickup.Error)
	require.NotNil(t, pickup.Cosmos)
	require.Equal(t, "Operations", pickup.Cosmos.ContainerName)
	require.Equal(t, "Leases", pickup.Cosmos.LeaseContainerName)
	require.Equal(t, 500*time.Millisecond, pickup.Cosmos.FeedPollDelay)
	require.Equal(t, 100, pickup.Cosmos.MaxItemsPerInvocation)
}

func TestLoadHostJSON(t *testing.T) {
	dynamic := map[string]string{"WEBSITE_SKU": "Dynamic"}
	tests := []struct {
		name     string
		host     string
		settings map[string]string
		want     HostConfig
		wantErr  string
	}{
		{
			name: "defaults: threshold is half the batch per processor",
			host: minimalHostJSON,
			want: HostConfig{
				FunctionTimeout: 30 * time.Minute,
				Queues: QueuesConfig{BatchSize: 16, NewBatchThreshold: 8 * runtime.NumCPU(), MaxDequeueCount: 5,
					MaxPollingInterval: time.Minute, MessageEncoding: EncodingBase64},
				Handler: HandlerConfig{ExecutablePath: "handler", WorkingDirectory: "."},
			},
		},
		{
			name:     "Consumption plan defaults: one processor, 5 minutes",
			host:     minimalHostJSON,
			settings: dynamic,
			want: HostConfig{
				FunctionTimeout: 5 * time.Minute,
				Queues: QueuesConfig{BatchSize: 16, NewBatchThreshold: 8, MaxDequeueCount: 5,
					MaxPollingInterval: time.Minute, MessageEncoding: EncodingBase64},
				Handler: HandlerConfig{ExecutablePath: "handler", WorkingDirectory: "."},
			},
		},
		{
			name: "threshold follows batch size; none encoding; no timeout; working directory",
			host: `{"version":"2.0","functionTimeout":"-1",
				"extensions":{"queues":{"batchSize":5,"MaxDequeueCount":2,"visibilityTimeout":"00:00:01","maxPollingInterval":"00:00:00.5","messageEncoding":"None"}},
				"customHandler":{"description":{"defaultExecutablePath":"bin/h","arguments":["-x"],"workingDirectory":"bin"}}}`,
			settings: map[string]string{"WEBSITE_SKU": "ElasticPremium"},
			want: HostConfig{
				Queues: QueuesConfig{BatchSize: 5, NewBatchThreshold: 2 * runtime.NumCPU(), MaxDequeueCount: 2,
					VisibilityTimeout: time.Second, MaxPollingInterval: 500 * time.Millisecond, MessageEncoding: EncodingNone},
				Handler: HandlerConfig{ExecutablePath: "bin/h", Arguments: []string{"-x"}, WorkingDirectory: "bin"},
			},
		},
		{name: "version", host: `{"customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: `version must be "2.0"`},
		{name: "no custom handler", host: `{"version":"2.0"}`, wantErr: "defaultExecutablePath is required"},
		{name: "batch size", host: `{"version":"2.0","extensions":{"queues":{"batchSize":64}},"customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "batchSize must be 1-32"},
		{name: "encoding", host: `{"version":"2.0","extensions":{"queues":{"messageEncoding":"utf8"}},"customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "messageEncoding must be base64 or none"},
		{name: "polling interval", host: `{"version":"2.0","extensions":{"queues":{"maxPollingInterval":"00:00:00.01"}},"customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "maxPollingInterval must be at least"},
		{name: "timeout", host: `{"version":"2.0","functionTimeout":"5m","customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "functionTimeout"},
		{name: "timeout below a second", host: `{"version":"2.0","functionTimeout":"00:00:00.5","customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "between 1 second"},
		{name: "no unbounded timeout on Consumption", settings: dynamic, host: `{"version":"2.0","functionTimeout":"-1","customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "between 1 second and 10m0s"},
		{name: "Consumption timeout at most 10 minutes", settings: dynamic, host: `{"version":"2.0","functionTimeout":"00:11:00","customHandler":{"description":{"defaultExecutablePath":"h"}}}`, wantErr: "between 1 second and 10m0s"},
		{name: "not JSON", host: `{`, wantErr: "parsing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeApp(t, map[string]string{"host.json": tt.host})
			got, err := loadHostConfig(dir, tt.settings)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.want.Handler.WorkingDirectory = filepath.Join(dir, tt.want.Handler.WorkingDirectory)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestLoadFunctions(t *testing.T) {
	const conn = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;"
	settings := map[string]string{
		"AzureWebJobsStorage": conn,
		"SCHEDULE":            "*/5 * * * * *",
		"QUEUE":               "Work",
		"PREFIX":              "pre",
	}
	tests := []struct {
		name     string
		function string
		settings map[string]string
		check    func(t *testing.T, fn Function)
		wantErr  string
	}{
		{
			name: "settings resolved in schedule and queue name",
			function: `{"bindings":[
				{"name":"t","type":"timerTrigger","direction":"in","schedule":"%SCHEDULE%","runOnStartup":true},
				{"name":"out","type":"queue","direction":"out","queueName":"%PREFIX%-%QUEUE%"}]}`,
			check: func(t *testing.T, fn Function) {
				require.Equal(t, "*/5 * * * * *", fn.Timer.Schedule.String())
				require.True(t, fn.Timer.RunOnStartup)
				require.False(t, fn.Timer.UseMonitor, "sub-minute schedules default to no monitor")
				require.Equal(t, "pre-work", fn.Outputs[0].QueueName, "queue names are lower-cased")
				require.Equal(t, DefaultConnection, fn.Outputs[0].Connection)
				require.Equal(t, conn, fn.Outputs[0].connectionString)
			},
		},
		{
			name:     "hourly schedule monitors by default; TimeSpan schedule",
			function: `{"bindings":[{"name":"t","type":"TimerTrigger","direction":"In","schedule":"01:00:00"}]}`,
			check: func(t *testing.T, fn Function) {
				require.True(t, fn.Timer.UseMonitor)
				require.Equal(t, "01:00:00", fn.Timer.Schedule.String())
			},
		},
		{
			name:     "queue trigger with AzureWebJobs-prefixed connection and binary data",
			function: `{"bindings":[{"name":"msg","type":"queueTrigger","direction":"in","queueName":"%QUEUE%","connection":"Storage","dataType":"binary"}]}`,
			check: func(t *testing.T, fn Function) {
				require.Equal(t, "msg", fn.Queue.Binding)
				require.Equal(t, "work", fn.Queue.QueueName)
				require.Equal(t, "Storage", fn.Queue.Connection)
				require.Equal(t, conn, fn.Queue.connectionString)
				require.Equal(t, "binary", fn.Queue.DataType)
			},
		},
		{
			name:     "development storage",
			function: `{"bindings":[{"name":"msg","type":"queueTrigger","direction":"in","queueName":"q","connection":"Dev"}]}`,
			settings: map[string]string{"Dev": "UseDevelopmentStorage=true"},
			check: func(t *testing.T, fn Function) {
				require.Equal(t, AzuriteConnectionString, fn.Queue.connectionString)
			},
		},
		{
			name:     "disabled by app setting",
			function: `{"bindings":[{"name":"msg","type":"queueTrigger","direction":"in","queueName":"q"}]}`,
			settings: map[string]string{"AzureWebJobs.fn.Disabled": "true", "AzureWebJobsStorage": conn},
			check: func(t *testing.T, fn Function) {
				require.True(t, fn.Disabled)
			},
		},
		{
			name:     "disabled in function.json",
			function: `{"disabled":"true","bindings":[{"name":"msg","type":"queueTrigger","direction":"in","queueName":"q"}]}`,
			check: func(t *testing.T, fn Function) {
				require.True(t, fn.Disabled)
			},
		},
		// A setting that does not resolve puts only its function in error:
		// the host logs it and runs the others.
		{name: "missing schedule setting", function: `{"bindings":[{"name":"t","type":"timerTrigger","direction":"in","schedule":"%NOPE%"}]}`, check: inError(`setting "NOPE" (from %NOPE%) is missing`)},
		{name: "missing queue setting", function: `{"bindings":[{"name":"m","type":"queueTrigger","direction":"in","queueName":"%NOPE%"}]}`, check: inError(`setting "NOPE"`)},
		{name: "missing output queue setting", function: `{"bindings":[{"name":"t","type":"timerTrigger","direction":"in","schedule":"* * * * * *"},{"name":"out","type":"queue","direction":"out","queueName":"%NOPE%"}]}`, check: inError(`setting "NOPE"`)},
		{name: "missing cosmos setting", function: `{"bindings":[{"name":"d","type":"cosmosDBTrigger","direction":"in","connection":"COSMOS","databaseName":"db","containerName":"c","leaseContainerName":"%NOPE%"}]}`, check: inError(`setting "NOPE"`)},
		{name: "missing cosmos connection", function: `{"bindings":[{"name":"d","type":"cosmosDBTrigger","direction":"in","connection":"COSMOS","databaseName":"db","containerName":"c"}]}`, check: inError(`configuration "COSMOS" does not exist`)},
		{name: "unterminated expression", function: `{"bindings":[{"name":"m","type":"queueTrigger","direction":"in","queueName":"%QUEUE"}]}`, wantErr: "unterminated"},
		{name: "missing connection", function: `{"bindings":[{"name":"m","type":"queueTrigger","direction":"in","queueName":"q","connection":"Other"}]}`, check: inError(`connection setting "Other" is missing`)},
		{name: "identity-based cosmos connection", function: `{"bindings":[{"name":"d","type":"cosmosDBTrigger","direction":"in","connection":"ID","databaseName":"db","containerName":"c"}]}`,
			settings: map[string]string{"ID__accountEndpoint": "https://x.documents.azure.com/"}, wantErr: "the emulator needs a connection string"},
		{name: "unknown binding type", function: `{"bindings":[{"name":"m","type":"queueTrigger","direction":"in","queueName":"q"},{"name":"doc","type":"cosmosDB","direction":"out"}]}`, wantErr: `unsupported binding type "cosmosDB"`},
		{name: "no trigger", function: `{"bindings":[{"name":"out","type":"queue","direction":"out","queueName":"q"}]}`, wantErr: "no trigger binding"},
		{name: "two triggers", function: `{"bindings":[{"name":"a","type":"queueTrigger","direction":"in","queueName":"q"},{"name":"b","type":"timerTrigger","direction":"in","schedule":"* * * * * *"}]}`, wantErr: "exactly one trigger"},
		{name: "queue input", function: `{"bindings":[{"name":"a","type":"queue","direction":"in","queueName":"q"}]}`, wantErr: "only queue output bindings"},
		{name: "bad schedule", function: `{"bindings":[{"name":"t","type":"timerTrigger","direction":"in","schedule":"* * * *"}]}`, wantErr: "want 6 fields"},
		{name: "no queue name", function: `{"bindings":[{"name":"m","type":"queueTrigger","direction":"in"}]}`, wantErr: "queueName is required"},
		{name: "no binding name", function: `{"bindings":[{"type":"queueTrigger","direction":"in","queueName":"q"}]}`, wantErr: "has no name"},
		{name: "bad boolean", function: `{"bindings":[{"name":"t","type":"timerTrigger","direction":"in","schedule":"* * * * * *","runOnStartup":"maybe"}]}`, wantErr: "runOnStartup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := settings
			if tt.settings != nil {
				s = tt.settings
			}
			dir := writeApp(t, map[string]string{
				"host.json":        minimalHostJSON,
				"fn/function.json": tt.function,
				"lib/readme.txt":   "a folder without function.json is not a function",
			})
			h, err := Load(dir, s)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, err, filepath.Join("fn", "function.json"), "the error names the file")
				return
			}
			require.NoError(t, err)
			fns := h.Functions()
			require.Len(t, fns, 1)
			require.Equal(t, "fn", fns[0].Name)
			tt.check(t, fns[0])
		})
	}
}

// inError checks that a function is in error for a binding value that
// does not resolve, and so never runs.
func inError(want string) func(t *testing.T, fn Function) {
	return func(t *testing.T, fn Function) {
		require.True(t, fn.Disabled)
		require.ErrorContains(t, fn.Error, want)
		require.ErrorContains(t, fn.Error, filepath.Join("fn", "function.json"), "the error names the file")
		require.Nil(t, fn.Timer)
		require.Nil(t, fn.Queue)
		require.Nil(t, fn.Cosmos)
	}
}

func TestLoadNeedsAFunction(t *testing.T) {
	dir := writeApp(t, map[string]string{"host.json": minimalHostJSON})
	_, err := Load(dir, nil)
	require.ErrorContains(t, err, "no function.json found")

	_, err = Load(t.TempDir(), nil)
	require.ErrorContains(t, err, "host.json")
}

func TestScheduleMonitorRule(t *testing.T) {
	// Whatever function.json says, the timer extension turns the monitor
	// off for schedules that fire more than once a minute
	// (TimerSchedule.Create, ShouldDisableScheduleMonitor).
	tests := []struct {
		schedule, useMonitor string
		want                 bool
	}{
		{"*/10 * * * * *", "true", false},
		{"*/10 * * * * *", "", false},
		{"0,30 * * * * *", "true", false},
		{"*/10 0-59 * * * *", "true", false}, // NCrontab prints a full range as "*"
		{"*/10 */1 * 1-31 * 0-6", "true", false},
		{"*/10 * 9-17 * * *", "true", true}, // the hours are restricted: monitored
		{"*/10 * * * * 1-5", "true", true},
		{"0 * * * * *", "true", true}, // once a minute
		{"0 */5 * * * *", "", true},
		{"0 */5 * * * *", "false", false},
		{"00:00:30", "true", false},
		{"00:01:00", "true", true},
		{"01:00:00", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.schedule+" useMonitor="+tt.useMonitor, func(t *testing.T) {
			um := ""
			if tt.useMonitor != "" {
				um = `,"useMonitor":` + tt.useMonitor
			}
			dir := writeApp(t, map[string]string{
				"host.json":        minimalHostJSON,
				"fn/function.json": `{"bindings":[{"name":"t","type":"timerTrigger","direction":"in","schedule":"` + tt.schedule + `"` + um + `}]}`,
			})
			h, err := Load(dir, nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, h.Functions()[0].Timer.UseMonitor)
		})
	}
}
