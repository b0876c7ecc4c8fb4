// Package hostemu is a local stand-in for the Azure Functions host, for local
// runs, tests and benchmarks only: Azure Functions Core Tools cannot be
// installed on the development machines, and production runs on the real
// Functions host.
//
// It reads the app's host.json and every <function>/function.json, starts
// the custom handler named by customHandler.description with
// FUNCTIONS_CUSTOMHANDLER_PORT, and drives it the way the real host does.
// Each behaviour follows a file of the host's source (repositories
// Azure/azure-functions-host, Azure/azure-webjobs-sdk,
// Azure/azure-webjobs-sdk-extensions, and the Storage Queues extension 5.x
// in Azure/azure-sdk-for-net); where the host and our wish differ, the host
// wins. What is modelled:
//
//   - Configuration (ScriptJobHostOptionsSetup, QueuesOptions,
//     SkuUtility): functionTimeout defaults to 30 minutes (5 on the
//     Consumption plan, WEBSITE_SKU=Dynamic); batchSize 16, at most 32;
//     newBatchThreshold (batchSize/2) × the processor count (1 on
//     Consumption); maxDequeueCount 5; visibilityTimeout 0;
//     maxPollingInterval 1 minute; messageEncoding base64.
//   - Timer triggers (timer extension's TimerSchedule, TimerListener):
//     useMonitor is turned off for schedules that fire more than once a
//     minute whatever function.json says (ShouldDisableScheduleMonitor), so
//     the payload's ScheduleStatus is null; invocations never overlap; the
//     timer is armed only after an invocation ends, so an overrun is
//     followed at once by the next run; the listener is a singleton, run on
//     instance 0 (with Options.Flex, by a lease: see below).
//   - Queue listeners (QueueListener, QueueProcessor,
//     RandomizedExponentialBackoffStrategy, QueueListenerFactory): receives
//     of batchSize messages hidden for 10 minutes (renewed halfway); after a
//     receive that found messages the next comes at once while no more
//     than newBatchThreshold are in flight; an empty receive backs off
//     (min + 2^(n-1) × min × [0.8, 1.2), from 100 ms up to
//     maxPollingInterval); a write to the queue by this instance ends the
//     back-off, but one from before the receive began is forgotten, and
//     one by another instance never does (SharedQueueWatcher); a
//     failed message is released with visibilityTimeout, moved to
//     <queue>-poison after maxDequeueCount, or left hidden when the queue
//     has no poison queue; a message that does not decode goes to poison
//     without an invocation (QueueServiceClientProvider).
//   - Queue output bindings (WorkerFunctionInvoker.BindOutputsAsync,
//     FunctionBinding.BindAsyncCollectorAsync, HttpScriptInvocationResult-
//     Extensions.GetBindingValue, QueuesExtensionConfigProvider): written
//     within the invocation after a 2xx, one request per message; an array
//     is one message per element, an object is written as Newtonsoft's
//     indented JSON, a string that is valid base64 is decoded unless the
//     binding is binary (see outputMessages); a JSON-object ReturnValue is
//     merged over the outputs when no binding is "$return"
//     (WorkerFunctionInvoker.HandleOutputDictionary, see bindingValues);
//     a timeout fails the invocation but the writes it holds go on
//     (FunctionExecutor.InvokeWithTimeoutAsync).
//   - Cosmos DB triggers (extension 4.x: CosmosDBTriggerAttribute-
//     BindingProvider, CosmosDBTriggerListener, CosmosDBTriggerValueBinder,
//     and the change feed processor of Microsoft.Azure.Cosmos 3.41 it
//     runs: BootstrapperCore, PartitionLoadBalancerCore,
//     EqualPartitionsBalancingStrategy, PartitionSupervisorCore,
//     FeedProcessorCore, LeaseRenewerCore, AutoCheckpointer,
//     DocumentServiceLeaseManagerCosmos): every instance runs a listener
//     (with Options.Flex, the function's own instances), its owner name a
//     new GUID; a missing monitored or lease container keeps it from
//     starting, logged as an error and retried after 2 s, doubling up to
//     2 minutes (FunctionListener), unless createLeaseContainerIfNotExists
//     made the host create it (/id, time to live on); the first listener
//     creates one lease document per partition key range, id
//     "<prefix><host>_<database rid>_<container rid>..<range>", under a
//     ".lock" document, and marks the store with ".info"; every
//     leaseAcquireInterval (13 s) a listener takes free or expired leases
//     up to its share (a lease expires leaseExpirationInterval, 60 s,
//     after its owner last wrote it), and it renews its own every
//     leaseRenewInterval (17 s, the first after half); the owner reads the
//     range's feed from the lease's continuation, else from now, the
//     beginning or startFromTime, maxItemsPerInvocation documents at most
//     a read; a page is one invocation (Data: the documents' compact JSON
//     array as a string, serialized once more; Metadata: "sys" only), and
//     its continuation is checkpointed after the invocation whether it
//     succeeded or not; a read that finds nothing waits feedPollDelay
//     (5 s); a batch in flight when the listener stops is not
//     checkpointed, outside drain mode, and the lease is released; a
//     crashed instance keeps its lease until it expires, and the next
//     owner reads on from the last checkpoint. A function retry policy is
//     refused: it is not modelled.
//   - Invocation payloads (ScriptInvocationContextExtensions,
//     Utility.ApplyBindingData, QueueTriggerBinding): {"Data":{binding:
//     value},"Metadata":{...}}; a string queue message is serialized twice
//     (see QueueDataForm); metadata strings are serialized once more
//     ("Id":"\"…\"", "DequeueCount":"1"), times are whole seconds with
//     "+00:00", and the message's top-level JSON properties are copied into
//     the metadata.
//   - The worker process (DefaultHttpWorkerService, HttpWorkerProcess,
//     WorkerProcess, HttpFunctionInvocationDispatcher,
//     WebScriptHostExceptionHandler): GET / every 25 ms until any answer, for
//     up to 30 s; every invocation goes to the instance's one handler, with
//     a W3C traceparent header (HttpClient's DiagnosticsHandler, under the
//     invocation's Activity) and no trace context in the payload; a 2xx
//     answer with an empty body or the JSON null is no result, and the
//     invocation waits until it times out (HttpContentExtensions.
//     ReadAsAsync, DefaultHttpWorkerService.ProcessDefaultInvocation-
//     Request); an invocation past functionTimeout fails and the handler is
//     killed and started again; the third handler failure within 30
//     minutes of the one before stops the host (Options.Restart then starts
//     it again, as the platform would).
//   - Logs (WorkerProcess.ParseErrorMessageAndLog, DefaultHttpWorkerService.
//     ProcessLogsFromHttpResponse): stdout lines at Information, stderr lines
//     at Error or, when they contain "warn", Warning; a response's Logs at
//     Information, and only for a 2xx (see Options.OnLog).
//   - The Flex Consumption plan, with Options.Flex (FlexOptions): one
//     function per instance (FunctionGroupListenerDecorator,
//     FUNCTIONS_TARGET_GROUP); the instances of a queue- or Cosmos
//     DB-triggered function set by a scale controller, from zero unless
//     some are always ready, from the queue's length (QueueTargetScaler,
//     QueueMetricsProvider) or the change feed's lag (CosmosDBTargetScaler,
//     CosmosDBMetricsProvider, ChangeFeedEstimatorIterator; the step of
//     four and the decision interval from Microsoft's documentation), up
//     to maximumInstanceCount per group or, with AppWideLimit, for the
//     whole app; an instance stopped by stopping its listeners, waiting
//     for the invocations in flight (QueueListener.StopAsync,
//     TimerListener.StopAsync) and checkpointing a Cosmos DB trigger's
//     batch (drain mode), then killing the handler (WorkerProcess.Dispose),
//     never with SIGTERM; the
//     timer a singleton by a 60 s lease that a crashed holder keeps until
//     it runs out, retried once a minute by the others (SingletonListener,
//     SingletonManager, SingletonOptions). FlexOptions.Overshoot lets a
//     group run instances beyond the maximum (Azure/azure-functions-host
//     #11790 reports it for HTTP triggers; for the others it is an
//     assumption). Host.RollingUpdate is the rolling site update strategy
//     ("Site update strategies in Flex Consumption"): new instances with
//     the new settings beside the old, which are drained then killed, in
//     batches whose size and overlap Microsoft does not document.
//     Instance.Freeze and Thaw stop and resume a handler (SIGSTOP,
//     SIGCONT), as a paused VM would.
//
// Options.StorageLatency adds a delay to every Storage request, standing in
// for the round trip to a real account. The emulator's own choices, where
// the host's source has nothing to follow, are marked as such: Run fails
// when the first handler cannot start, and without Options.Flex stops the
// handlers with SIGTERM and a drain when its context ends; with it, a
// crashed instance is replaced at once, scale-in stops the newest
// instances first, FlexOptions.ScaleInDelay defaults to a minute, a
// trigger's lag is counted in documents rather than LSNs, and
// FlexOptions.StartDelay (none by default) stands in for the cold start
// Flex does not document.
package hostemu
