package functions

import (
	"encoding/json"
	"fmt"
)

// Documents reads the changed documents a Cosmos DB trigger delivers in
// Data[binding], one raw JSON value each, in the order of the batch.
//
// For a custom handler the trigger's parameter is a string: the extension
// turns the batch into the compact text of a JSON array
// (CosmosDBTriggerValueBinder), and the host serializes that string once
// more (ScriptInvocationContextExtensions), so the value is a JSON string
// holding a JSON string holding the array. The array itself, a string
// holding it quoted any number of times, and base64 of any of those are
// read too, with whitespace around. An element is returned whatever its
// kind, so that one odd document never fails the others: the caller judges
// each. Every error it returns names the binding and what is wrong, and
// answers 400 (see StatusOf).
func (inv *Invocation) Documents(binding string) ([]json.RawMessage, error) {
	raw, ok := lookup(inv.Data, binding)
	if !ok {
		return nil, BadRequest(fmt.Errorf("documents %q: binding missing from Data", binding))
	}
	arr, err := unwrapArray(raw)
	if err != nil {
		return nil, BadRequest(fmt.Errorf("documents %q: %w", binding, err))
	}
	var docs []json.RawMessage
	if err := json.Unmarshal(arr, &docs); err != nil {
		return nil, BadRequest(fmt.Errorf("documents %q: %w", binding, err))
	}
	return docs, nil
}
