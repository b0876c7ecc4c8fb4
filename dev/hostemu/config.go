package hostemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opstatus/opstatus/internal/schedule"
)

// DefaultConnection is the connection setting a queue binding uses when its
// function.json names none.
const DefaultConnection = "AzureWebJobsStorage"

// AzuriteConnectionString is what UseDevelopmentStorage=true means: the
// well-known devstoreaccount1 account on Azurite's default queue port.
const AzuriteConnectionString = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
	"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
	"QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;"

// Message encodings of extensions.queues.messageEncoding.
const (
	EncodingBase64 = "base64"
	EncodingNone   = "none"
)

// HostConfig is what the emulator uses from host.json.
type HostConfig struct {
	// FunctionTimeout bounds one invocation; 0 means no limit ("-1").
	// Default 30 minutes, 5 on the Consumption plan (app setting
	// WEBSITE_SKU=Dynamic), as ScriptJobHostOptionsSetup.
	// ConfigureFunctionTimeout sets it.
	FunctionTimeout time.Duration
	Queues          QueuesConfig
	Handler         HandlerConfig
}

// QueuesConfig is host.json's extensions.queues, with the host's defaults
// filled in.
type QueuesConfig struct {
	BatchSize int // default 16, at most 32
	// NewBatchThreshold defaults to (BatchSize/2) × the processor count,
	// which is 1 on the Consumption plan (QueuesOptions.NewBatchThreshold,
	// SkuUtility.ProcessorCount).
	NewBatchThreshold  int
	MaxDequeueCount    int           // default 5
	VisibilityTimeout  time.Duration // delay before a failed message reappears; default 0
	MaxPollingInterval time.Duration // default 1 minute, at least 100 ms
	MessageEncoding    string        // EncodingBase64 (default) or EncodingNone
}

// HandlerConfig is host.json's customHandler.description.
type HandlerConfig struct {
	// ExecutablePath is defaultExecutablePath as written. A relative path
	// is looked up in the app directory first, then on PATH, like the host.
	ExecutablePath string
	Arguments      []string
	// WorkingDirectory is absolute: the app directory when host.json leaves
	// it empty, relative paths resolved against the app directory.
	WorkingDirectory string
}

// Function is one function of the app: a folder holding function.json.
type Function struct {
	// Name is the folder name; the host POSTs to /<Name>.
	Name string
	// Disabled is function.json's "disabled" or the app setting
	// AzureWebJobs.<Name>.Disabled=true, or Error is set. A disabled
	// function never runs.
	Disabled bool
	// Error is why the host put the function in error when it loaded the
	// app: a %SETTING% or a connection of a binding that is not an app
	// setting. The host logs it at Error and runs the other functions
	// (ScriptHost's FunctionErrors, logged by FunctionError as "The
	// '<name>' function is in error"), so an app can ship a function that
	// only some deployments configure. Its trigger fields are nil.
	Error error
	// Exactly one of Timer, Queue and Cosmos is set.
	Timer   *TimerTrigger
	Queue   *QueueTrigger
	Cosmos  *CosmosTrigger
	Outputs []QueueOutput
}

// TimerTrigger is a timerTrigger binding.
type TimerTrigger struct {
	Binding      string
	Schedule     schedule.Schedule // %SETTING% already resolved
	RunOnStartup bool
	// UseMonitor makes the payload carry ScheduleStatus. It is
	// function.json's useMonitor (default true), turned off for a schedule
	// that fires more often than once a minute whatever function.json says
	// (TimerSchedule.Create, ShouldDisableScheduleMonitor).
	UseMonitor bool
}

// QueueTrigger is a queueTrigger binding.
type QueueTrigger struct {
	Binding    string
	QueueName  string // %SETTING% already resolved
	Connection string // the setting name
	DataType   string // "", "string" or "binary"

	connectionString string
}

// QueueOutput is a queue output binding.
type QueueOutput struct {
	Binding    string
	QueueName  string // %SETTING% already resolved
	Connection string // the setting name
	DataType   string

	connectionString string
}

// hostJSON is the part of host.json the emulator reads. encoding/json
// matches keys case-insensitively, as .NET configuration binding does.
type hostJSON struct {
	Version         string  `json:"version"`
	FunctionTimeout *string `json:"functionTimeout"`
	Extensions      struct {
		Queues struct {
			BatchSize          *int    `json:"batchSize"`
			NewBatchThreshold  *int    `json:"newBatchThreshold"`
			MaxDequeueCount    *int    `json:"maxDequeueCount"`
			VisibilityTimeout  *string `json:"visibilityTimeout"`
			MaxPollingInterval *string `json:"maxPollingInterval"`
			MessageEncoding    *string `json:"messageEncoding"`
		} `json:"queues"`
	} `json:"extensions"`
	CustomHandler *struct {
		Description struct {
			DefaultExecutablePath string   `json:"defaultExecutablePath"`
			WorkingDirectory      string   `json:"workingDirectory"`
			Arguments             []string `json:"arguments"`
		} `json:"description"`
	} `json:"customHandler"`
}

type functionJSON struct {
	Disabled json.RawMessage `json:"disabled"`
	Bindings []bindingJSON   `json:"bindings"`
	Retry    json.RawMessage `json:"retry"`
}

type bindingJSON struct {
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	Direction    string          `json:"direction"`
	Schedule     string          `json:"schedule"`
	RunOnStartup json.RawMessage `json:"runOnStartup"`
	UseMonitor   json.RawMessage `json:"useMonitor"`
	QueueName    string          `json:"queueName"`
	Connection   string          `json:"connection"`
	DataType     string          `json:"dataType"`

	// cosmosDBTrigger (extension 4.x: CosmosDBTriggerAttribute).
	DatabaseName                    string          `json:"databaseName"`
	ContainerName                   string          `json:"containerName"`
	LeaseConnection                 string          `json:"leaseConnection"`
	LeaseDatabaseName               string          `json:"leaseDatabaseName"`
	LeaseContainerName              string          `json:"leaseContainerName"`
	LeaseContainerPrefix            string          `json:"leaseContainerPrefix"`
	CreateLeaseContainerIfNotExists json.RawMessage `json:"createLeaseContainerIfNotExists"`
	FeedPollDelay                   json.RawMessage `json:"feedPollDelay"`
	LeaseAcquireInterval            json.RawMessage `json:"leaseAcquireInterval"`
	LeaseExpirationInterval         json.RawMessage `json:"leaseExpirationInterval"`
	LeaseRenewInterval              json.RawMessage `json:"leaseRenewInterval"`
	MaxItemsPerInvocation           json.RawMessage `json:"maxItemsPerInvocation"`
	StartFromBeginning              json.RawMessage `json:"startFromBeginning"`
	StartFromTime                   string          `json:"startFromTime"`
}

// loadHostConfig reads appDir/host.json. settings are the app settings,
// which tell the plan (WEBSITE_SKU) that some defaults depend on.
func loadHostConfig(appDir string, settings map[string]string) (HostConfig, error) {
	path := filepath.Join(appDir, "host.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return HostConfig{}, fmt.Errorf("reading host.json: %w", err)
	}
	var hj hostJSON
	if err := json.Unmarshal(data, &hj); err != nil {
		return HostConfig{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	if hj.Version != "2.0" {
		return HostConfig{}, fmt.Errorf("%s: version must be \"2.0\", got %q", path, hj.Version)
	}
	consumption := strings.EqualFold(settings["WEBSITE_SKU"], "Dynamic")

	// ScriptJobHostOptionsSetup.ConfigureFunctionTimeout: the default and
	// the bounds depend on the plan; "-1" means no limit where the plan
	// allows it.
	cfg := HostConfig{FunctionTimeout: 30 * time.Minute}
	maxTimeout := time.Duration(math.MaxInt64)
	if consumption {
		cfg.FunctionTimeout, maxTimeout = 5*time.Minute, 10*time.Minute
	}
	if hj.FunctionTimeout != nil {
		v := strings.TrimSpace(*hj.FunctionTimeout)
		d, ok := schedule.ParseTimeSpan(v)
		switch {
		case v == "-1" && !consumption:
			cfg.FunctionTimeout = 0
		case !ok && v != "-1":
			return HostConfig{}, fmt.Errorf("%s: functionTimeout %q is not a TimeSpan", path, *hj.FunctionTimeout)
		case d < time.Second || d > maxTimeout:
			return HostConfig{}, fmt.Errorf("%s: functionTimeout %q must be between 1 second and %v", path, *hj.FunctionTimeout, maxTimeout)
		default:
			cfg.FunctionTimeout = d
		}
	}

	q := hj.Extensions.Queues
	qc := QueuesConfig{
		BatchSize:          16,
		MaxDequeueCount:    5,
		MaxPollingInterval: time.Minute,
		MessageEncoding:    EncodingBase64,
	}
	if q.BatchSize != nil {
		qc.BatchSize = *q.BatchSize
	}
	if qc.BatchSize < 1 || qc.BatchSize > 32 {
		return HostConfig{}, fmt.Errorf("%s: extensions.queues.batchSize must be 1-32, got %d", path, qc.BatchSize)
	}
	processors := runtime.NumCPU() // Environment.ProcessorCount
	if consumption {
		processors = 1
	}
	qc.NewBatchThreshold = (qc.BatchSize / 2) * processors
	if q.NewBatchThreshold != nil {
		qc.NewBatchThreshold = *q.NewBatchThreshold
	}
	if qc.NewBatchThreshold < 0 {
		return HostConfig{}, fmt.Errorf("%s: extensions.queues.newBatchThreshold must not be negative", path)
	}
	if q.MaxDequeueCount != nil {
		qc.MaxDequeueCount = *q.MaxDequeueCount
	}
	if qc.MaxDequeueCount < 1 {
		return HostConfig{}, fmt.Errorf("%s: extensions.queues.maxDequeueCount must be positive", path)
	}
	if q.VisibilityTimeout != nil {
		d, ok := schedule.ParseTimeSpan(*q.VisibilityTimeout)
		if !ok {
			return HostConfig{}, fmt.Errorf("%s: extensions.queues.visibilityTimeout %q is not a TimeSpan", path, *q.VisibilityTimeout)
		}
		qc.VisibilityTimeout = d
	}
	if q.MaxPollingInterval != nil {
		d, ok := schedule.ParseTimeSpan(*q.MaxPollingInterval)
		if !ok {
			return HostConfig{}, fmt.Errorf("%s: extensions.queues.maxPollingInterval %q is not a TimeSpan", path, *q.MaxPollingInterval)
		}
		qc.MaxPollingInterval = d
	}
	if qc.MaxPollingInterval < minPollingInterval {
		return HostConfig{}, fmt.Errorf("%s: extensions.queues.maxPollingInterval must be at least %v", path, minPollingInterval)
	}
	if q.MessageEncoding != nil {
		qc.MessageEncoding = strings.ToLower(strings.TrimSpace(*q.MessageEncoding))
	}
	if qc.MessageEncoding != EncodingBase64 && qc.MessageEncoding != EncodingNone {
		return HostConfig{}, fmt.Errorf("%s: extensions.queues.messageEncoding must be base64 or none, got %q", path, qc.MessageEncoding)
	}
	cfg.Queues = qc

	if hj.CustomHandler == nil || strings.TrimSpace(hj.CustomHandler.Description.DefaultExecutablePath) == "" {
		return HostConfig{}, fmt.Errorf("%s: customHandler.description.defaultExecutablePath is required", path)
	}
	desc := hj.CustomHandler.Description
	wd := desc.WorkingDirectory
	switch {
	case wd == "":
		wd = appDir
	case !filepath.IsAbs(wd):
		wd = filepath.Join(appDir, wd)
	}
	cfg.Handler = HandlerConfig{
		ExecutablePath:   desc.DefaultExecutablePath,
		Arguments:        append([]string(nil), desc.Arguments...),
		WorkingDirectory: wd,
	}
	return cfg, nil
}

// loadFunctions reads every appDir/<name>/function.json, sorted by name.
func loadFunctions(appDir string, settings map[string]string) ([]Function, error) {
	entries, err := os.ReadDir(appDir)
	if err != nil {
		return nil, fmt.Errorf("listing functions: %w", err)
	}
	var fns []Function
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(appDir, e.Name(), "function.json")
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		fn, err := parseFunction(e.Name(), data, settings)
		var unresolved unresolvedError
		if errors.As(err, &unresolved) {
			fn = Function{Name: e.Name(), Disabled: true, Error: fmt.Errorf("%s: %w", path, err)}
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		fns = append(fns, fn)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].Name < fns[j].Name })
	return fns, nil
}

// parseFunction turns one function.json into a Function.
func parseFunction(name string, data []byte, settings map[string]string) (Function, error) {
	var fj functionJSON
	if err := json.Unmarshal(data, &fj); err != nil {
		return Function{}, fmt.Errorf("parsing: %w", err)
	}
	fn := Function{Name: name}
	disabled, err := jsonBool(fj.Disabled, false)
	if err != nil {
		return Function{}, fmt.Errorf("disabled: %w", err)
	}
	// Both names, as FunctionIndexer.IsDisabled (azure-webjobs-sdk) reads them.
	fn.Disabled = disabled || isTrue(settings["AzureWebJobs."+name+".Disabled"]) || isTrue(settings["AzureWebJobs_"+name+"_Disabled"])

	for i, b := range fj.Bindings {
		if b.Name == "" {
			return Function{}, fmt.Errorf("binding %d has no name", i)
		}
		dir := strings.ToLower(b.Direction)
		switch strings.ToLower(b.Type) {
		case "timertrigger":
			if dir != "in" {
				return Function{}, fmt.Errorf("binding %q: timerTrigger must have direction \"in\"", b.Name)
			}
			t, err := parseTimer(b, settings)
			if err != nil {
				return Function{}, fmt.Errorf("binding %q: %w", b.Name, err)
			}
			if fn.hasTrigger() {
				return Function{}, fmt.Errorf("binding %q: a function has exactly one trigger", b.Name)
			}
			fn.Timer = t
		case "queuetrigger":
			if dir != "in" {
				return Function{}, fmt.Errorf("binding %q: queueTrigger must have direction \"in\"", b.Name)
			}
			queue, conn, cs, err := parseQueueBinding(b, settings)
			if err != nil {
				return Function{}, fmt.Errorf("binding %q: %w", b.Name, err)
			}
			if fn.hasTrigger() {
				return Function{}, fmt.Errorf("binding %q: a function has exactly one trigger", b.Name)
			}
			fn.Queue = &QueueTrigger{Binding: b.Name, QueueName: queue, Connection: conn, DataType: strings.ToLower(b.DataType), connectionString: cs}
		case "cosmosdbtrigger":
			if dir != "in" {
				return Function{}, fmt.Errorf("binding %q: cosmosDBTrigger must have direction \"in\"", b.Name)
			}
			c, err := parseCosmosTrigger(b, settings)
			if err != nil {
				return Function{}, fmt.Errorf("binding %q: %w", b.Name, err)
			}
			if fn.hasTrigger() {
				return Function{}, fmt.Errorf("binding %q: a function has exactly one trigger", b.Name)
			}
			fn.Cosmos = c
		case "queue":
			if dir != "out" {
				return Function{}, fmt.Errorf("binding %q: only queue output bindings (direction \"out\") are supported", b.Name)
			}
			queue, conn, cs, err := parseQueueBinding(b, settings)
			if err != nil {
				return Function{}, fmt.Errorf("binding %q: %w", b.Name, err)
			}
			fn.Outputs = append(fn.Outputs, QueueOutput{Binding: b.Name, QueueName: queue, Connection: conn, DataType: strings.ToLower(b.DataType), connectionString: cs})
		default:
			return Function{}, fmt.Errorf("binding %q: unsupported binding type %q", b.Name, b.Type)
		}
	}
	if !fn.hasTrigger() {
		return Function{}, errors.New("no trigger binding")
	}
	if fn.Cosmos != nil && len(fj.Retry) > 0 && string(fj.Retry) != "null" {
		// The host runs a retry policy for this trigger (CosmosDBTriggerBinding
		// is [SupportsRetry]): ignoring it would show batches lost where the
		// host invokes them again.
		return Function{}, errors.New("retry: the emulator does not model retry policies")
	}
	return fn, nil
}

func (fn *Function) hasTrigger() bool { return fn.Timer != nil || fn.Queue != nil || fn.Cosmos != nil }

func parseTimer(b bindingJSON, settings map[string]string) (*TimerTrigger, error) {
	expr, err := resolveSettings(b.Schedule, settings)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("schedule is required")
	}
	sched, err := schedule.Parse(expr)
	if err != nil {
		return nil, err
	}
	runOnStartup, err := jsonBool(b.RunOnStartup, false)
	if err != nil {
		return nil, fmt.Errorf("runOnStartup: %w", err)
	}
	useMonitor, err := jsonBool(b.UseMonitor, true)
	if err != nil {
		return nil, fmt.Errorf("useMonitor: %w", err)
	}
	if useMonitor && disablesMonitor(sched, time.Now()) {
		useMonitor = false
	}
	return &TimerTrigger{Binding: b.Name, Schedule: sched, RunOnStartup: runOnStartup, UseMonitor: useMonitor}, nil
}

// disablesMonitor is the timer extension's rule for turning useMonitor off
// (TimerSchedule.Create): a TimeSpan schedule under a minute, or an
// NCRONTAB schedule whose fields other than the seconds are all "*" once
// NCrontab has normalised them (a full range prints as "*") and that fires
// more than once between now and a minute later
// (TimerSchedule.ShouldDisableScheduleMonitor).
func disablesMonitor(s schedule.Schedule, now time.Time) bool {
	cron, ok := s.(*schedule.CronSchedule)
	if !ok {
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		return s.Next(t0).Sub(t0) < time.Minute
	}
	fields := strings.Fields(cron.String())
	for i := 1; i < len(fields); i++ {
		if !fullCronField(i, fields[i]) {
			return false
		}
	}
	// CrontabSchedule.GetNextOccurrences(now, now+1min): strictly between.
	end := now.Add(time.Minute)
	n := 0
	for t := s.Next(now); !t.IsZero() && t.Before(end); t = s.Next(t) {
		if n++; n > 1 {
			return true
		}
	}
	return false
}

// fullCronField reports whether field i (1 minute … 5 day of week) of an
// NCRONTAB expression covers its whole range: every value of the field
// fires when the other fields are "*".
func fullCronField(i int, field string) bool {
	parts := []string{"0", "*", "*", "*", "*", "*"}
	parts[i] = field
	s, err := schedule.ParseCron(strings.Join(parts, " "))
	if err != nil {
		return false
	}
	// One probe time per value of the field; 2025-01-05 is a Sunday.
	base := time.Date(2025, 1, 5, 0, 0, 0, 0, time.UTC)
	var probes []time.Time
	switch i {
	case 1:
		for m := range 60 {
			probes = append(probes, base.Add(time.Duration(m)*time.Minute))
		}
	case 2:
		for h := range 24 {
			probes = append(probes, base.Add(time.Duration(h)*time.Hour))
		}
	case 3:
		for d := 1; d <= 31; d++ {
			probes = append(probes, time.Date(2025, 1, d, 0, 0, 0, 0, time.UTC))
		}
	case 4:
		for m := 1; m <= 12; m++ {
			probes = append(probes, time.Date(2025, time.Month(m), 1, 0, 0, 0, 0, time.UTC))
		}
	case 5:
		for d := range 7 {
			probes = append(probes, base.AddDate(0, 0, d))
		}
	}
	for _, p := range probes {
		if !s.Next(p.Add(-time.Second)).Equal(p) {
			return false
		}
	}
	return true
}

// parseQueueBinding resolves a queue binding's queue name and connection.
func parseQueueBinding(b bindingJSON, settings map[string]string) (queue, conn, connString string, err error) {
	queue, err = resolveSettings(b.QueueName, settings)
	if err != nil {
		return "", "", "", fmt.Errorf("queueName: %w", err)
	}
	if queue == "" {
		return "", "", "", errors.New("queueName is required")
	}
	// Queue names are lower case; the host lower-cases what it is given.
	queue = strings.ToLower(queue)
	conn = b.Connection
	if conn == "" {
		conn = DefaultConnection
	}
	connString, err = resolveConnection(conn, settings)
	if err != nil {
		return "", "", "", err
	}
	return queue, conn, connString, nil
}

// unresolvedError is a binding value that needs an app setting that is
// not set. It puts only its function in error; any other mistake in
// function.json fails the whole load, so that it is found at once.
type unresolvedError struct{ error }

func (e unresolvedError) Unwrap() error { return e.error }

// resolveConnection finds a connection string setting the way the host
// does: the name itself, then AzureWebJobs<name>.
func resolveConnection(name string, settings map[string]string) (string, error) {
	v, ok := settings[name]
	if !ok || v == "" {
		v, ok = settings["AzureWebJobs"+name]
	}
	if !ok || v == "" {
		return "", unresolvedError{fmt.Errorf("connection setting %q is missing", name)}
	}
	if strings.EqualFold(strings.TrimRight(strings.TrimSpace(v), ";"), "UseDevelopmentStorage=true") {
		return AzuriteConnectionString, nil
	}
	return v, nil
}

// resolveSettings replaces every %NAME% in s with the setting NAME.
func resolveSettings(s string, settings map[string]string) (string, error) {
	var out strings.Builder
	for {
		start := strings.IndexByte(s, '%')
		if start < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		end := strings.IndexByte(s[start+1:], '%')
		if end < 0 {
			return "", fmt.Errorf("unterminated %%...%% expression in %q", s)
		}
		name := s[start+1 : start+1+end]
		v, ok := settings[name]
		if !ok {
			return "", unresolvedError{fmt.Errorf("setting %q (from %%%s%%) is missing", name, name)}
		}
		out.WriteString(s[:start])
		out.WriteString(v)
		s = s[start+end+2:]
	}
}

// jsonBool reads a boolean that function.json may write as true or "true".
func jsonBool(raw json.RawMessage, def bool) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err == nil {
		return b, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if v, err := strconv.ParseBool(s); err == nil {
			return v, nil
		}
	}
	return false, fmt.Errorf("%s is not a boolean", raw)
}

func isTrue(s string) bool {
	v, err := strconv.ParseBool(strings.TrimSpace(s))
	return err == nil && v
}
