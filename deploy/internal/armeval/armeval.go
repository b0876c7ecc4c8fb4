// Package armeval resolves an ARM template for one deployment the way ARM
// would: parameters checked against their declarations, variables, every
// expression of every resource, copy loops, conditions and nested
// deployments, so that each value can be followed back to the resource it
// names. It knows only the functions deploy/azuredeploy.json uses and fails
// on any other, so the template cannot grow a value deploy's checks do not
// see. It is test machinery: only deploy's tests import it.
package armeval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Scope is where a resolved deployment lands.
type Scope struct {
	Subscription, ResourceGroup, Location string
	// Existing stands for the resources outside the template that
	// reference() reads at deployment, by lowercase ID: each as ARM's
	// 'Full' form answers it, its properties under "properties".
	Existing map[string]map[string]any
}

// WithExisting returns a copy of s in which the existing resource id is
// as given.
func (s Scope) WithExisting(id string, r map[string]any) Scope {
	out := s
	out.Existing = map[string]map[string]any{}
	for k, v := range s.Existing {
		out.Existing[k] = v
	}
	out.Existing[strings.ToLower(id)] = r
	return out
}

// ReadJSON decodes a JSON file keeping numbers exact.
func ReadJSON(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return DecodeJSON(b)
}

// DecodeJSON decodes a JSON object keeping numbers exact.
func DecodeJSON(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// DeepCopy copies a decoded JSON object, for tests that edit a template.
func DeepCopy(v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	c, err := DecodeJSON(b)
	if err != nil {
		panic(err)
	}
	return c
}

// ParameterValues reads the values of a deployment parameters file.
func ParameterValues(file map[string]any) (map[string]any, error) {
	params, _ := file["parameters"].(map[string]any)
	values := make(map[string]any, len(params))
	for name, p := range params {
		pm, ok := p.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("parameter %s: not an object", name)
		}
		v, ok := pm["value"]
		if !ok {
			return nil, fmt.Errorf("parameter %s: no value (Key Vault references are secrets, which this template takes none of)", name)
		}
		values[name] = v
	}
	return values, nil
}

// Resource is one resolved resource of a deployment, nested ones included.
type Resource struct {
	Type, APIVersion, Name string
	// ID is the resource's full ID; for an extension resource it sits under
	// the ID of its scope.
	ID string
	// Scope is the full ID of an extension resource's scope, else empty.
	Scope string
	// Body is the resolved resource object.
	Body map[string]any
	// Template numbers the template that declares it: 0 the main one, then
	// each nested template in the order met.
	Template int
}

// Deployment is a template resolved with parameter values.
type Deployment struct {
	Scope Scope
	// Params are the parameters' values, given or defaulted.
	Params    map[string]any
	Variables map[string]any
	Resources []Resource
	// outputs are the template's raw outputs, which Output resolves.
	outputs map[string]any
	eval    *evaluator
	// Declared holds, by template number, the lowercase IDs of every
	// resource the template declares, those whose condition is false too:
	// what its dependsOn may name.
	Declared []map[string]bool
}

// Resolve evaluates a template for one deployment: given parameter values,
// defaults for the others, then variables and every resource, following
// nested deployments into the resource group they target.
func Resolve(tmpl map[string]any, given map[string]any, scope Scope) (*Deployment, error) {
	e, err := newEvaluator(tmpl, given, scope)
	if err != nil {
		return nil, err
	}
	d := &Deployment{Scope: scope, Params: e.params, Variables: map[string]any{}, Declared: []map[string]bool{{}}}
	vars, _ := tmpl["variables"].(map[string]any)
	for name := range vars {
		v, err := e.variable(name)
		if err != nil {
			return nil, err
		}
		d.Variables[name] = v
	}
	if err := e.resources(tmpl, d); err != nil {
		return nil, err
	}
	d.eval = e
	d.outputs, _ = tmpl["outputs"].(map[string]any)
	return d, nil
}

// Output resolves one of the template's outputs.
func (d *Deployment) Output(name string) (any, error) {
	o, ok := d.outputs[name]
	if !ok {
		return nil, fmt.Errorf("the template has no output %s", name)
	}
	v, err := d.eval.value(Path(o, "value"))
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", name, err)
	}
	return v, nil
}

// ByType returns the resolved resources of a type.
func (d *Deployment) ByType(typ string) []Resource {
	var out []Resource
	for _, r := range d.Resources {
		if strings.EqualFold(r.Type, typ) {
			out = append(out, r)
		}
	}
	return out
}

// One returns the only resource of a type.
func (d *Deployment) One(typ string) (Resource, error) {
	rs := d.ByType(typ)
	if len(rs) != 1 {
		return Resource{}, fmt.Errorf("%d resources of type %s, want 1", len(rs), typ)
	}
	return rs[0], nil
}

// Path walks nested objects; nil when a step is missing.
func Path(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
