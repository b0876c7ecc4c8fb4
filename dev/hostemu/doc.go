// Package hostemu is a local stand-in for the Azure Functions host, for local
// runs and tests only: Azure Functions Core Tools cannot be installed on the
// development machines, and production runs on the real Functions host.
//
// It reads the app's host.json and every <function>/function.json, starts
// the custom handler named by customHandler.description with
// FUNCTIONS_CUSTOMHANDLER_PORT, and drives it the way the real host does:
//
//   - timerTrigger: six-field NCRONTAB or TimeSpan schedules; invocations
//     never overlap; the timer runs on one instance only (the host's
//     listener singleton);
//   - queueTrigger on Azure Storage queues (Azurite locally): batches of
//     extensions.queues.batchSize dequeued with a 10-minute visibility
//     timeout, a new batch when in-flight messages fall to
//     newBatchThreshold, randomized exponential back-off up to
//     maxPollingInterval on an empty queue, release with visibilityTimeout
//     on failure, <queue>-poison after maxDequeueCount;
//   - queue output bindings, written after a 2xx response, encoded per
//     extensions.queues.messageEncoding.
//
// The invocation payloads copy what the host's custom-handler code sends:
// {"Data":{binding: value},"Metadata":{...}} where string metadata values are
// JSON-serialized once more ("Id":"\"…\"", "DequeueCount":"1") and a string
// queue message is serialized twice (see [QueueDataForm]). Where the real
// host behaves in a surprising way, the emulator does too, and the code says
// which host source the behaviour comes from.
package hostemu
