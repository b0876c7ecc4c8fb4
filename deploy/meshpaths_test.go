package deploy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/opstatus/opstatus/internal/clusterservice"
)

// The paths the mesh policies admit are derived, not listed: the internalId
// forms are the ones clusterservice.ParseInternalID names, and the requests
// are the ones the real client sends for each of them, seen by a recording
// server.

// csRequest is one request opstatus sends to Cluster Service, its
// identifiers replaced by Istio's one-segment path template operator {*}.
type csRequest struct{ method, path string }

func (r csRequest) String() string { return r.method + " " + r.path }

// anySegment is Istio's path template operator for one path segment.
const anySegment = "{*}"

// samplePrefix starts every identifier the derivation puts into a form; no
// literal segment of a Cluster Service path starts with it.
const samplePrefix = "sample-"

// internalIDForms returns the paths ParseInternalID accepts, as its own
// error message names them (/api/.../clusters/{id}, ...), after checking
// that every path it accepts among those built from the same segments is
// one of them: a form added to the parser but not to its message fails here.
func internalIDForms() ([]string, error) {
	_, err := clusterservice.ParseInternalID("/api/unknown")
	if err == nil {
		return nil, errors.New("ParseInternalID accepts /api/unknown")
	}
	var forms []string
	for _, f := range regexp.MustCompile(`/api/[A-Za-z0-9_/{}]+[A-Za-z0-9_}]`).FindAllString(err.Error(), -1) {
		if strings.Contains(f, "{") { // not the quoted input
			forms = append(forms, f)
		}
	}
	if len(forms) == 0 {
		return nil, fmt.Errorf("ParseInternalID's error names no form: %v", err)
	}
	var known []string // the forms, each identifier {*}
	vocabulary := map[string]bool{}
	prefixes := map[string]bool{}
	for _, f := range forms {
		known = append(known, templated(placeholders(f)))
		seg := strings.Split(f[1:], "/")
		if len(seg) < 5 {
			return nil, fmt.Errorf("form %s is shorter than /api/{api}/{version}/clusters/{id}", f)
		}
		prefixes[strings.Join(seg[:4], "/")] = true
		for _, s := range seg {
			if !strings.HasPrefix(s, "{") {
				vocabulary[s] = true
			}
		}
	}
	words := []string{samplePrefix + "x"}
	for w := range vocabulary {
		words = append(words, w)
	}
	sort.Strings(words)
	for prefix := range prefixes {
		// Every suffix of up to three segments.
		suffixes, last := []string{""}, []string{""}
		for range 3 {
			var next []string
			for _, s := range last {
				for _, w := range words {
					next = append(next, s+"/"+w)
				}
			}
			suffixes, last = append(suffixes, next...), next
		}
		for _, s := range suffixes {
			p := "/" + prefix + "/" + samplePrefix + "c" + s
			named := slices.ContainsFunc(known, func(k string) bool { return istioPathMatch(k, p) })
			if _, err := clusterservice.ParseInternalID(p); err == nil && !named {
				return nil, fmt.Errorf("ParseInternalID accepts %s, which its error message does not name", p)
			}
		}
	}
	return forms, nil
}

// placeholders replaces each {name} of a form with a sample identifier.
func placeholders(form string) string {
	n := 0
	return regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllStringFunc(form, func(string) string {
		n++
		return fmt.Sprintf("%s%d", samplePrefix, n)
	})
}

// templated replaces each sample identifier of a path with {*}.
func templated(p string) string {
	seg := strings.Split(p, "/")
	for i, s := range seg {
		if strings.HasPrefix(s, samplePrefix) {
			seg[i] = anySegment
		}
	}
	return strings.Join(seg, "/")
}

// opstatusRequests returns every request the Cluster Service client sends
// for every internalId form, templated, and the concrete paths it sent.
// Every method of the client that takes an InternalID is called with every
// form; the ones a form does not fit refuse it without a request.
func opstatusRequests() ([]csRequest, []string, error) {
	forms, err := internalIDForms()
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	sent := map[csRequest]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent[csRequest{r.Method, r.URL.Path}] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Error","id":"404","href":"/api/clusters_mgmt/v1/errors/404","code":"CLUSTERS-MGMT-404","reason":"not found"}`))
	}))
	defer srv.Close()
	client, err := clusterservice.NewClient(clusterservice.Config{URL: srv.URL})
	if err != nil {
		return nil, nil, err
	}
	defer client.Close()

	ctxType := reflect.TypeFor[context.Context]()
	idType := reflect.TypeFor[clusterservice.InternalID]()
	cv := reflect.ValueOf(client)
	methods := 0
	for _, form := range forms {
		id, err := clusterservice.ParseInternalID(placeholders(form))
		if err != nil {
			return nil, nil, fmt.Errorf("form %s: %w", form, err)
		}
		for i := range cv.NumMethod() {
			m := cv.Method(i)
			if t := m.Type(); t.NumIn() != 2 || t.In(0) != ctxType || t.In(1) != idType {
				continue
			}
			methods++
			m.Call([]reflect.Value{reflect.ValueOf(context.Background()), reflect.ValueOf(id)})
		}
	}
	if methods == 0 {
		return nil, nil, errors.New("the client has no method that takes an InternalID")
	}
	var reqs []csRequest
	var concrete []string
	for r := range sent {
		concrete = append(concrete, r.path)
		t := csRequest{r.method, templated(r.path)}
		if !slices.Contains(reqs, t) {
			reqs = append(reqs, t)
		}
	}
	if len(reqs) == 0 {
		return nil, nil, errors.New("the client sent no request")
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].String() < reqs[j].String() })
	sort.Strings(concrete)
	return reqs, concrete, nil
}

// istioPathMatch is how an AuthorizationPolicy's path matches a request's
// path, the query removed (istio.io/api security/v1beta1
// authorization_policy.proto, Operation.paths): with {*} (one non-empty
// segment) or {**} (the rest, last operator only) a path template;
// otherwise "*" for any path, "x*" a prefix, "*x" a suffix, else exact.
func istioPathMatch(pattern, path string) bool {
	if strings.Contains(pattern, "{*}") || strings.Contains(pattern, "{**}") {
		ps, ss := strings.Split(pattern, "/"), strings.Split(path, "/")
		for i, p := range ps {
			switch {
			case p == "{**}":
				return true
			case i >= len(ss):
				return false
			case p == anySegment:
				if ss[i] == "" {
					return false
				}
			case p != ss[i]:
				return false
			}
		}
		return len(ps) == len(ss)
	}
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(path, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(path, strings.TrimPrefix(pattern, "*"))
	}
	return pattern == path
}

// nearMisses are paths one step from those opstatus calls: the parent, a
// child, a trailing slash and the other API's path. Those that no request
// of calls (templated) could be are what a too-wide policy path would let
// through.
func nearMisses(concrete []string, calls []string) []string {
	var out []string
	add := func(p string) {
		could := slices.ContainsFunc(calls, func(c string) bool { return istioPathMatch(c, p) })
		if !could && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range concrete {
		add(p[:strings.LastIndex(p, "/")])
		add(p + "/" + samplePrefix + "x")
		add(p + "/")
		add(p + "/status")
		for _, swap := range [][2]string{
			{"/api/" + clusterservice.APIClustersMgmtV1 + "/", "/api/" + clusterservice.APIAroHCPV1alpha1 + "/"},
			{"/api/" + clusterservice.APIAroHCPV1alpha1 + "/", "/api/" + clusterservice.APIClustersMgmtV1 + "/"},
		} {
			if strings.HasPrefix(p, swap[0]) {
				add(swap[1] + strings.TrimPrefix(p, swap[0]))
			}
		}
	}
	sort.Strings(out)
	return out
}
