package armeval

import (
	"crypto/sha1"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// reads: only the properties referenceProperties models can be read.
type reference struct {
	id   string
	path string
}

// referenceProperties are the runtime properties the template may read,
// with what Azure answers for them: an identity's ids stand for themselves
// so that every use of one can be traced to its resource; endpoints are
// built from the resource's name as Azure's public cloud builds them.
var referenceProperties = map[string]func(id, name string) string{
	"Microsoft.ManagedIdentity/userAssignedIdentities clientId":    func(id, _ string) string { return "clientId(" + id + ")" },
	"Microsoft.ManagedIdentity/userAssignedIdentities principalId": func(id, _ string) string { return "principalId(" + id + ")" },
	"Microsoft.Insights/components ConnectionString":               func(id, _ string) string { return "connectionString(" + id + ")" },
	"Microsoft.Storage/storageAccounts primaryEndpoints.blob":      func(_, name string) string { return "https://" + name + ".blob.core.windows.net/" },
	"Microsoft.Storage/storageAccounts primaryEndpoints.table":     func(_, name string) string { return "https://" + name + ".table.core.windows.net/" },
	"Microsoft.DocumentDB/databaseAccounts documentEndpoint":       func(_, name string) string { return "https://" + name + ".documents.azure.com:443/" },
	// A data collection endpoint's metrics ingestion endpoint has a
	// random part and the region in Azure's answer; this form keeps its
	// name, and a rule's immutable ID stands for itself.
	"Microsoft.Insights/dataCollectionEndpoints metricsIngestion.endpoint": func(_, name string) string {
		return "https://" + name + "-a1b2.eastus-1.metrics.ingest.monitor.azure.com"
	},
	"Microsoft.Insights/dataCollectionRules immutableId": func(id, _ string) string { return "immutableId(" + id + ")" },
}

// ResourceType splits a full resource ID into its type and last name.
func ResourceType(id string) (typ, name string) {
	i := strings.LastIndex(id, "/providers/")
	if i < 0 {
		return "", ""
	}
	parts := strings.Split(id[i+len("/providers/"):], "/")
	if len(parts) < 3 {
		return "", ""
	}
	t := []string{parts[0]}
	for j := 1; j+1 < len(parts); j += 2 {
		t = append(t, parts[j])
		name = parts[j+1]
	}
	return strings.Join(t, "/"), name
}

func property(v any, name string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		p, ok := x[name]
		if !ok {
			return nil, fmt.Errorf("no property %s", name)
		}
		return p, nil
	case reference:
		p := name
		if x.path != "" {
			p = x.path + "." + name
		}
		typ, rname := ResourceType(x.id)
		if f, ok := referenceProperties[typ+" "+p]; ok {
			return f(x.id, rname), nil
		}
		for k := range referenceProperties {
			if strings.HasPrefix(k, typ+" "+p+".") {
				return reference{id: x.id, path: p}, nil
			}
		}
		return nil, fmt.Errorf("reference(%s).%s is not a property these checks model", x.id, p)
	}
	return nil, fmt.Errorf("no property %s on %v", name, v)
}

func index(v, idx any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		k, ok := idx.(string)
		if !ok {
			return nil, fmt.Errorf("index %v of an object is not a string", idx)
		}
		p, ok := x[k]
		if !ok {
			return nil, fmt.Errorf("no property %q", k)
		}
		return p, nil
	case []any:
		i, ok := idx.(int64)
		if !ok || i < 0 || int(i) >= len(x) {
			return nil, fmt.Errorf("index %v out of range", idx)
		}
		return x[i], nil
	}
	return nil, fmt.Errorf("cannot index %v", v)
}

// call evaluates a template function. Each follows ARM's definition for the
// arguments the template passes; guid is a stable hash of its arguments, not
// ARM's own value, which only has to be unique and repeatable.
func (e *evaluator) call(name string, args []any) (any, error) {
	strs := func() ([]string, error) {
		out := make([]string, len(args))
		for i, a := range args {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("%s: argument %d is %v, not a string", name, i+1, a)
			}
			out[i] = s
		}
		return out, nil
	}
	ints := func() ([]int64, error) {
		out := make([]int64, len(args))
		for i, a := range args {
			n, ok := a.(int64)
			if !ok {
				return nil, fmt.Errorf("%s: argument %d is %v, not an int", name, i+1, a)
			}
			out[i] = n
		}
		return out, nil
	}
	switch name {
	case "parameters", "variables":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("%s takes one name", name)
		}
		if name == "parameters" {
			return e.parameter(s[0])
		}
		return e.variable(s[0])
	case "copyIndex":
		if e.copyIndex == nil {
			return nil, fmt.Errorf("copyIndex outside a copy loop")
		}
		n, err := ints()
		if err != nil || len(n) > 1 {
			return nil, fmt.Errorf("copyIndex takes at most an offset; a loop's name is not something these checks follow")
		}
		if len(n) == 1 {
			return *e.copyIndex + n[0], nil
		}
		return *e.copyIndex, nil
	case "length":
		if len(args) != 1 {
			return nil, fmt.Errorf("length takes one argument")
		}
		switch x := args[0].(type) {
		case []any:
			return int64(len(x)), nil
		case string:
			return int64(len(x)), nil
		}
		return nil, fmt.Errorf("length: %v is not an array or a string", args[0])
	case "startsWith":
		s, err := strs()
		if err != nil || len(s) != 2 {
			return nil, fmt.Errorf("startsWith takes two strings")
		}
		// ARM compares without case.
		return strings.HasPrefix(strings.ToLower(s[0]), strings.ToLower(s[1])), nil
	case "resourceGroup":
		return map[string]any{
			"name":     e.scope.ResourceGroup,
			"location": e.scope.Location,
			"id":       fmt.Sprintf("/subscriptions/%s/resourceGroups/%s", e.scope.Subscription, e.scope.ResourceGroup),
		}, nil
	case "subscription":
		return map[string]any{
			"subscriptionId": e.scope.Subscription,
			"id":             "/subscriptions/" + e.scope.Subscription,
		}, nil
	case "resourceId":
		s, err := strs()
		if err != nil {
			return nil, err
		}
		rg := e.scope.ResourceGroup
		i := 0
		for i < len(s) && !strings.Contains(s[i], "/") {
			i++
		}
		switch i {
		case 0:
		case 1:
			rg = s[0]
		default:
			return nil, fmt.Errorf("resourceId: a subscription argument is not something these checks follow")
		}
		if i >= len(s)-1 {
			return nil, fmt.Errorf("resourceId: needs a type and names")
		}
		return fmt.Sprintf("/subscriptions/%s/resourceGroups/%s/providers/%s", e.scope.Subscription, rg, typedNames(s[i], s[i+1:])), nil
	case "subscriptionResourceId":
		s, err := strs()
		if err != nil || len(s) < 2 || !strings.Contains(s[0], "/") {
			return nil, fmt.Errorf("subscriptionResourceId takes a type and names")
		}
		return fmt.Sprintf("/subscriptions/%s/providers/%s", e.scope.Subscription, typedNames(s[0], s[1:])), nil
	case "extensionResourceId":
		s, err := strs()
		if err != nil || len(s) < 3 {
			return nil, fmt.Errorf("extensionResourceId takes a scope, a type and names")
		}
		return s[0] + "/providers/" + typedNames(s[1], s[2:]), nil
	case "reference":
		if len(args) < 1 || len(args) > 3 {
			return nil, fmt.Errorf("reference takes a resource ID, an API version and 'Full'")
		}
		s, err := strs()
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(s[0], "/subscriptions/") {
			return nil, fmt.Errorf("reference(%s): give the resource's full ID", s[0])
		}
		if r, ok := e.scope.Existing[strings.ToLower(s[0])]; ok {
			if len(s) == 3 && strings.EqualFold(s[2], "Full") {
				return r, nil
			}
			return r["properties"], nil
		}
		if len(s) == 3 {
			return nil, fmt.Errorf("reference(%s, 'Full') of a resource these checks do not model", s[0])
		}
		return reference{id: s[0]}, nil
	case "format":
		if len(args) < 1 {
			return nil, fmt.Errorf("format takes a format string")
		}
		f, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("format: the format is not a string")
		}
		for i, a := range args[1:] {
			s, err := toString(a)
			if err != nil {
				return nil, fmt.Errorf("format: %w", err)
			}
			f = strings.ReplaceAll(f, "{"+strconv.Itoa(i)+"}", s)
		}
		return f, nil
	case "string":
		if len(args) != 1 {
			return nil, fmt.Errorf("string takes one argument")
		}
		return toString(args[0])
	case "min":
		n, err := ints()
		if err != nil || len(n) == 0 {
			return nil, fmt.Errorf("min takes ints")
		}
		m := n[0]
		for _, x := range n[1:] {
			m = min(m, x)
		}
		return m, nil
	case "div", "mul", "add", "greater", "greaterOrEquals":
		n, err := ints()
		if err != nil || len(n) != 2 {
			return nil, fmt.Errorf("%s takes two ints", name)
		}
		switch name {
		case "mul":
			return n[0] * n[1], nil
		case "add":
			return n[0] + n[1], nil
		case "greater":
			return n[0] > n[1], nil
		case "greaterOrEquals":
			return n[0] >= n[1], nil
		}
		if n[1] == 0 {
			return nil, fmt.Errorf("div by zero")
		}
		return n[0] / n[1], nil
	case "empty":
		if len(args) != 1 {
			return nil, fmt.Errorf("empty takes one argument")
		}
		switch x := args[0].(type) {
		case string:
			return x == "", nil
		case []any:
			return len(x) == 0, nil
		case nil:
			return true, nil
		}
		return nil, fmt.Errorf("empty: %v is not a string or an array", args[0])
	case "equals":
		if len(args) != 2 {
			return nil, fmt.Errorf("equals takes two arguments")
		}
		return fmt.Sprint(args[0]) == fmt.Sprint(args[1]), nil
	case "and", "or":
		if len(args) < 2 {
			return nil, fmt.Errorf("%s takes two or more bools", name)
		}
		all, some := true, false
		for _, a := range args {
			b, ok := a.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: %v is not a bool", name, a)
			}
			all = all && b
			some = some || b
		}
		if name == "or" {
			return some, nil
		}
		return all, nil
	case "fail":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("fail takes a message")
		}
		return nil, fmt.Errorf("the deployment fails: %s", s[0])
	case "toLower":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("toLower takes a string")
		}
		return strings.ToLower(s[0]), nil
	case "split":
		s, err := strs()
		if err != nil || len(s) != 2 {
			return nil, fmt.Errorf("split takes a string and a delimiter")
		}
		var out []any
		for _, part := range strings.Split(s[0], s[1]) {
			out = append(out, part)
		}
		return out, nil
	case "lastIndexOf":
		s, err := strs()
		if err != nil || len(s) != 2 {
			return nil, fmt.Errorf("lastIndexOf takes a string and a string to find")
		}
		return int64(strings.LastIndex(s[0], s[1])), nil
	case "substring":
		if len(args) != 3 {
			return nil, fmt.Errorf("substring takes a string, a start and a length")
		}
		s, ok1 := args[0].(string)
		start, ok2 := args[1].(int64)
		n, ok3 := args[2].(int64)
		if !ok1 || !ok2 || !ok3 || start < 0 || n < 0 || start+n > int64(len(s)) {
			return nil, fmt.Errorf("substring(%v, %v, %v): out of range", args[0], args[1], args[2])
		}
		return s[start : start+n], nil
	case "contains":
		if len(args) != 2 {
			return nil, fmt.Errorf("contains takes a container and a value")
		}
		switch c := args[0].(type) {
		case string:
			s, ok := args[1].(string)
			if !ok {
				return nil, fmt.Errorf("contains: %v is not a string", args[1])
			}
			return strings.Contains(c, s), nil
		case map[string]any:
			k, ok := args[1].(string)
			if !ok {
				return nil, fmt.Errorf("contains: %v is not a property name", args[1])
			}
			_, has := c[k]
			return has, nil
		}
		return nil, fmt.Errorf("contains: %v is not a string or an object", args[0])
	case "first", "last":
		if len(args) != 1 {
			return nil, fmt.Errorf("%s takes an array", name)
		}
		l, ok := args[0].([]any)
		if !ok || len(l) == 0 {
			return nil, fmt.Errorf("%s: %v is not an array with items", name, args[0])
		}
		if name == "first" {
			return l[0], nil
		}
		return l[len(l)-1], nil
	case "parseCidr":
		s, err := strs()
		if err != nil || len(s) != 1 {
			return nil, fmt.Errorf("parseCidr takes a CIDR string")
		}
		prefix, err := netip.ParsePrefix(s[0])
		if err != nil {
			return nil, fmt.Errorf("parseCidr: %w", err)
		}
		return map[string]any{"network": prefix.Masked().Addr().String(), "cidr": int64(prefix.Bits())}, nil
	case "createArray":
		return append([]any{}, args...), nil
	case "createObject":
		if len(args)%2 != 0 {
			return nil, fmt.Errorf("createObject takes pairs of names and values")
		}
		out := map[string]any{}
		for i := 0; i < len(args); i += 2 {
			k, ok := args[i].(string)
			if !ok {
				return nil, fmt.Errorf("createObject: name %v is not a string", args[i])
			}
			out[k] = args[i+1]
		}
		return out, nil
	case "concat":
		// ARM concatenates arrays, or strings, not a mix.
		var list []any
		for i, a := range args {
			l, ok := a.([]any)
			if !ok {
				return nil, fmt.Errorf("concat: argument %d is %v; these checks concatenate arrays only", i+1, a)
			}
			list = append(list, l...)
		}
		return append([]any{}, list...), nil
	case "not":
		if len(args) != 1 {
			return nil, fmt.Errorf("not takes one argument")
		}
		b, ok := args[0].(bool)
		if !ok {
			return nil, fmt.Errorf("not: %v is not a bool", args[0])
		}
		return !b, nil
	case "true", "false":
		if len(args) != 0 {
			return nil, fmt.Errorf("%s takes no arguments", name)
		}
		return name == "true", nil
	case "null":
		if len(args) != 0 {
			return nil, fmt.Errorf("null takes no arguments")
		}
		return nil, nil
	case "guid":
		s, err := strs()
		if err != nil || len(s) == 0 {
			return nil, fmt.Errorf("guid takes strings")
		}
		h := sha1.Sum([]byte(strings.Join(s, "\x00")))
		return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]), nil
	}
	return nil, fmt.Errorf("function %s is not one these checks evaluate", name)
}

func toString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", fmt.Errorf("%v is not a string, int or bool", v)
}
