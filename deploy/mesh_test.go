package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/template"

	"github.com/opstatus/opstatus/deploy/internal/armeval"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	securityapi "istio.io/api/security/v1beta1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The mesh chart (deploy/mesh) is what ARO-HCP applies in its service
// cluster so that opstatus can reach Cluster Service. Its checks render it
// as helm template would, decode every manifest strictly into the
// Kubernetes and Istio API types, and hold it to the Cluster Service ARO-HCP
// runs, to opstatus's template and to the requests opstatus's client sends.

// Cluster Service as ARO-HCP deploys it, at the 2024-10 version opstatus
// serves (cluster-service/deploy/istio.yml and
// openshift-templates/arohcp-service-template.yml at 0195ac565) and today
// (cluster-service/deploy/templates/service.yaml and istio.yml): a
// ClusterIP Service on port 8000 whose pods carry app: clusters-service, in
// the mesh's trust domain.
const (
	csService       = "clusters-service"
	csPort          = 8000
	csAppLabel      = "clusters-service"
	meshTrustDomain = "cluster.local"
)

// csNamespaces are the namespaces Cluster Service has run in: at 2024-10
// and today.
var csNamespaces = []string{"cluster-service", "clusters-service"}

// meshDir holds the chart.
const meshDir = "mesh"

// meshChart is the chart's files by slash path under meshDir.
type meshChart map[string]string

func readMeshChart() (meshChart, error) {
	c := meshChart{}
	err := filepath.WalkDir(meshDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(meshDir, p)
		c[filepath.ToSlash(rel)] = string(b)
		return err
	})
	return c, err
}

func (c meshChart) copy() meshChart {
	out := meshChart{}
	for k, v := range c {
		out[k] = v
	}
	return out
}

// values decodes values.yaml as Helm does, through JSON.
func (c meshChart) values() (map[string]any, error) {
	var v map[string]any
	if err := yaml.Unmarshal([]byte(c["values.yaml"]), &v); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	return v, nil
}

// render executes the templates as helm template does: Go templates over
// .Values, _-prefixed files defining and not rendering. The chart uses no
// function of Helm's own, so Go's engine renders it the same; a value the
// templates name but values.yaml lacks is an error here.
func (c meshChart) render() (map[string]string, error) {
	values, err := c.values()
	if err != nil {
		return nil, err
	}
	var names []string
	for name := range c {
		if strings.HasPrefix(name, "templates/") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	root := template.New("").Option("missingkey=error")
	for _, name := range names {
		if _, err := root.New(name).Parse(c[name]); err != nil {
			return nil, err
		}
	}
	out := map[string]string{}
	for _, name := range names {
		if strings.HasPrefix(filepath.Base(name), "_") {
			continue
		}
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, name, map[string]any{"Values": values}); err != nil {
			return nil, err
		}
		out[name] = b.String()
	}
	return out, nil
}

// mesh is the chart's manifests, decoded.
type mesh struct {
	values         map[string]any
	service        *corev1.Service
	gateway        *networkingv1beta1.Gateway
	virtualService *networkingv1beta1.VirtualService
	requestAuthn   *securityv1.RequestAuthentication
	policies       []*securityv1.AuthorizationPolicy
}

// decodeMesh renders the chart and decodes each manifest strictly: a field
// the type does not have, or one written under another name than its JSON
// name, is an error, and so is a kind or version these checks do not know.
func decodeMesh(c meshChart) (*mesh, error) {
	rendered, err := c.render()
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	m := &mesh{}
	if m.values, err = c.values(); err != nil {
		return nil, err
	}
	var names []string
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for i, doc := range strings.Split(rendered[name], "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			if err := m.decode([]byte(doc)); err != nil {
				return nil, fmt.Errorf("%s (document %d): %w", name, i+1, err)
			}
		}
	}
	return m, nil
}

func (m *mesh) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	gvk := tm.GroupVersionKind()
	switch gvk {
	case corev1.SchemeGroupVersion.WithKind("Service"):
		if m.service != nil {
			return errors.New("a second Service")
		}
		m.service = &corev1.Service{}
		return yaml.UnmarshalStrict(doc, m.service)
	case networkingv1beta1.SchemeGroupVersion.WithKind("Gateway"):
		if m.gateway != nil {
			return errors.New("a second Gateway")
		}
		m.gateway = &networkingv1beta1.Gateway{}
		return decodeIstio(doc, &m.gateway.TypeMeta, &m.gateway.ObjectMeta, &m.gateway.Spec)
	case networkingv1beta1.SchemeGroupVersion.WithKind("VirtualService"):
		if m.virtualService != nil {
			return errors.New("a second VirtualService")
		}
		m.virtualService = &networkingv1beta1.VirtualService{}
		return decodeIstio(doc, &m.virtualService.TypeMeta, &m.virtualService.ObjectMeta, &m.virtualService.Spec)
	case securityv1.SchemeGroupVersion.WithKind("RequestAuthentication"):
		if m.requestAuthn != nil {
			return errors.New("a second RequestAuthentication")
		}
		m.requestAuthn = &securityv1.RequestAuthentication{}
		return decodeIstio(doc, &m.requestAuthn.TypeMeta, &m.requestAuthn.ObjectMeta, &m.requestAuthn.Spec)
	case securityv1.SchemeGroupVersion.WithKind("AuthorizationPolicy"):
		p := &securityv1.AuthorizationPolicy{}
		m.policies = append(m.policies, p)
		return decodeIstio(doc, &p.TypeMeta, &p.ObjectMeta, &p.Spec)
	}
	return fmt.Errorf("%s is not a type these checks know (v1 Service, networking.istio.io/v1beta1 Gateway and VirtualService, security.istio.io/v1 RequestAuthentication and AuthorizationPolicy)", gvk)
}

// istioManifest is an Istio object before its spec is decoded: the spec is
// a protobuf message, whose JSON decoder in istio.io/api ignores unknown
// fields, so it is decoded apart with protojson, which does not.
type istioManifest struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            json.RawMessage   `json:"spec"`
}

func decodeIstio(doc []byte, tm *metav1.TypeMeta, om *metav1.ObjectMeta, spec proto.Message) error {
	var env istioManifest
	if err := yaml.UnmarshalStrict(doc, &env); err != nil {
		return err
	}
	*tm, *om = env.TypeMeta, env.Metadata
	if len(env.Spec) == 0 {
		return errors.New("no spec")
	}
	if err := protojson.Unmarshal(env.Spec, spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	var raw any
	if err := json.Unmarshal(env.Spec, &raw); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return jsonNames(raw, spec.ProtoReflect().Descriptor(), "spec")
}

// jsonNames refuses a field written under its proto name (credential_name
// for credentialName): protojson takes both, the Kubernetes API server only
// the JSON name of the CRD's schema.
func jsonNames(v any, md protoreflect.MessageDescriptor, at string) error {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil // protojson has checked the value's shape
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			return fmt.Errorf("%s.%s: not the JSON name of a field of %s", at, k, md.FullName())
		}
		var err error
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				entries, _ := obj[k].(map[string]any)
				for ek, ev := range entries {
					if err = jsonNames(ev, fd.MapValue().Message(), at+"."+k+"."+ek); err != nil {
						break
					}
				}
			}
		case fd.IsList():
			if fd.Kind() == protoreflect.MessageKind {
				items, _ := obj[k].([]any)
				for i, item := range items {
					if err = jsonNames(item, fd.Message(), fmt.Sprintf("%s.%s[%d]", at, k, i)); err != nil {
						break
					}
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			err = jsonNames(obj[k], fd.Message(), at+"."+k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setFields lists the fields a message sets, by JSON name.
func setFields(m proto.Message) []string {
	var out []string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		out = append(out, fd.JSONName())
		return true
	})
	sort.Strings(out)
	return out
}

// onlyFields fails when a message sets a field outside allowed: a field the
// checks do not look at could widen what the manifest admits.
func onlyFields(what string, m proto.Message, allowed ...string) error {
	for _, f := range setFields(m) {
		if !slices.Contains(allowed, f) {
			return fmt.Errorf("%s sets %s; the checks allow only %s", what, f, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// value reads a string from the chart's values by its dotted path.
func (m *mesh) value(key string) string {
	var v any = m.values
	for _, k := range strings.Split(key, ".") {
		obj, _ := v.(map[string]any)
		v = obj[k]
	}
	s, _ := v.(string)
	return s
}

// gatewayLabels are the labels of the internal gateway's pods that every
// manifest selecting the gateway must use.
func (m *mesh) gatewayLabels() map[string]string {
	return map[string]string{"istio": m.value("gateway.selector")}
}

// gatewayPolicy and clusterServicePolicy are the chart's two authorization
// policies: at the gateway and at Cluster Service's sidecar.
func (m *mesh) gatewayPolicy() (*securityv1.AuthorizationPolicy, error) {
	return m.policyIn(m.value("gateway.namespace"))
}

func (m *mesh) clusterServicePolicy() (*securityv1.AuthorizationPolicy, error) {
	return m.policyIn(m.value("clusterService.namespace"))
}

// csNamespace is the chart's Cluster Service namespace, one ARO-HCP uses.
func (m *mesh) csNamespace() (string, error) {
	ns := m.value("clusterService.namespace")
	if !slices.Contains(csNamespaces, ns) {
		return "", fmt.Errorf("clusterService.namespace %q is not one ARO-HCP runs Cluster Service in (cluster-service at 2024-10, clusters-service today)", ns)
	}
	return ns, nil
}

func (m *mesh) policyIn(ns string) (*securityv1.AuthorizationPolicy, error) {
	var found []*securityv1.AuthorizationPolicy
	for _, p := range m.policies {
		if p.Namespace == ns {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d AuthorizationPolicies in namespace %s, want 1", len(found), ns)
	}
	return found[0], nil
}

var guid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// v1Issuer is the iss of an Entra ID v1.0 access token, the kind a managed
// identity gets from the Functions identity endpoint for a resource whose
// application does not ask for v2.0 tokens: https://<STS host>/<tenant>/
// (the STS host is the cloud's, sts.windows.net in Azure's public cloud).
var v1Issuer = regexp.MustCompile(`^https://([a-z0-9-]+(\.[a-z0-9-]+)+)/([0-9a-f-]{36})/$`)

// meshFixture is what the mesh checks read: the chart and opstatus's
// template with its example parameters.
type meshFixture struct {
	chart    meshChart
	template map[string]any
	params   map[string]any
	requests []csRequest
	concrete []string
}

// errNoAudienceParameter says the template does not declare
// clusterServiceAudience yet, so the audience cannot be compared.
var errNoAudienceParameter = errors.New("deploy/azuredeploy.json declares no clusterServiceAudience parameter")

// templateAudiences returns the audiences opstatus's template gives:
// clusterServiceAudience's default and its example value, those set.
func templateAudiences(tmpl, params map[string]any) ([]string, error) {
	def, ok := armeval.Path(tmpl, "parameters", "clusterServiceAudience").(map[string]any)
	if !ok {
		return nil, errNoAudienceParameter
	}
	var out []string
	if s, _ := def["defaultValue"].(string); s != "" {
		out = append(out, s)
	}
	if s, _ := params["clusterServiceAudience"].(string); s != "" {
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("clusterServiceAudience has neither a default nor an example value to compare the chart's audience with")
	}
	return out, nil
}

// meshChecks are the checks of the decoded chart.
var meshChecks = []struct {
	name  string
	check func(m *mesh, f meshFixture) error
}{
	{"load balancer", func(m *mesh, f meshFixture) error { return checkMeshService(m) }},
	{"gateway", func(m *mesh, f meshFixture) error { return checkMeshGateway(m, f) }},
	{"virtual service", func(m *mesh, f meshFixture) error { return checkMeshVirtualService(m) }},
	{"request authentication", func(m *mesh, f meshFixture) error { return checkMeshRequestAuthn(m) }},
	{"audience", func(m *mesh, f meshFixture) error { return checkMeshAudience(m, f) }},
	{"gateway policy", func(m *mesh, f meshFixture) error { return checkMeshGatewayPolicy(m, f) }},
	{"cluster service policy", func(m *mesh, f meshFixture) error { return checkMeshClusterServicePolicy(m, f) }},
}

// checkMeshService: an internal Azure load balancer, on the gateway's pods,
// port 443 only, open to one source prefix, at a fixed private address.
func checkMeshService(m *mesh) error {
	s := m.service
	switch {
	case s == nil:
		return errors.New("no Service")
	case s.Namespace != m.value("gateway.namespace"):
		return fmt.Errorf("Service in namespace %q, not the gateway's %q", s.Namespace, m.value("gateway.namespace"))
	case s.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return fmt.Errorf("Service type %q, want LoadBalancer", s.Spec.Type)
	case s.Annotations["service.beta.kubernetes.io/azure-load-balancer-internal"] != "true":
		return errors.New(`the load balancer is not internal: annotation service.beta.kubernetes.io/azure-load-balancer-internal is not "true"`)
	case s.Annotations["service.beta.kubernetes.io/azure-deny-all-except-load-balancer-source-ranges"] != "true":
		return errors.New(`the load balancer admits the rest of the network: annotation service.beta.kubernetes.io/azure-deny-all-except-load-balancer-source-ranges is not "true" (source ranges alone only add allow rules)`)
	case !mapsEqual(s.Spec.Selector, m.gatewayLabels()):
		return fmt.Errorf("Service selects %v, not the internal gateway's pods %v", s.Spec.Selector, m.gatewayLabels())
	case len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 443 || s.Spec.Ports[0].Protocol != corev1.ProtocolTCP:
		return fmt.Errorf("Service ports %v, want 443/TCP alone", s.Spec.Ports)
	case len(s.Spec.LoadBalancerSourceRanges) != 1:
		return fmt.Errorf("loadBalancerSourceRanges %v, want the Function App's subnet alone", s.Spec.LoadBalancerSourceRanges)
	}
	prefix, err := netip.ParsePrefix(s.Spec.LoadBalancerSourceRanges[0])
	if err != nil || !prefix.Addr().IsPrivate() || prefix.Bits() < 16 {
		return fmt.Errorf("loadBalancerSourceRanges %q is not one private subnet's prefix", s.Spec.LoadBalancerSourceRanges[0])
	}
	ip, err := netip.ParseAddr(s.Annotations["service.beta.kubernetes.io/azure-load-balancer-ipv4"])
	if err != nil || !ip.IsPrivate() {
		return fmt.Errorf("the load balancer's address %q is not a fixed private IPv4 address", s.Annotations["service.beta.kubernetes.io/azure-load-balancer-ipv4"])
	}
	return nil
}

// addonGatewayPorts are the ports the add-on's own Service of the gateway
// pods may expose: Istio's gateway chart's (status-port 15021, http2 80,
// https 443). For a selector Gateway istiod binds a server port that a
// Service of the pods exposes to the target port of the oldest such Service.
var addonGatewayPorts = []int32{15021, 80, 443}

// checkMeshGateway: HTTPS on the port the load balancer sends to, which no
// other Service of the gateway pods exposes, a certificate from a Secret,
// the one host opstatus's example URL names.
func checkMeshGateway(m *mesh, f meshFixture) error {
	g := m.gateway
	if g == nil {
		return errors.New("no Gateway")
	}
	if g.Namespace != m.value("gateway.namespace") {
		return fmt.Errorf("Gateway in namespace %q, not the gateway's %q", g.Namespace, m.value("gateway.namespace"))
	}
	if !mapsEqual(g.Spec.GetSelector(), m.gatewayLabels()) {
		return fmt.Errorf("Gateway selects %v, not the internal gateway's pods %v", g.Spec.GetSelector(), m.gatewayLabels())
	}
	if len(g.Spec.GetServers()) != 1 {
		return fmt.Errorf("%d servers, want one", len(g.Spec.GetServers()))
	}
	s := g.Spec.GetServers()[0]
	tls := s.GetTls()
	switch {
	case s.GetPort().GetProtocol() != "HTTPS":
		return fmt.Errorf("server protocol %q, want HTTPS", s.GetPort().GetProtocol())
	case m.service != nil && int(s.GetPort().GetNumber()) != m.service.Spec.Ports[0].TargetPort.IntValue():
		return fmt.Errorf("server port %d is not the target port %s the load balancer sends to", s.GetPort().GetNumber(), m.service.Spec.Ports[0].TargetPort.String())
	case m.service != nil && slices.Contains(append(addonGatewayPorts, m.service.Spec.Ports[0].Port), int32(s.GetPort().GetNumber())):
		return fmt.Errorf("server port %d is a port a Service of the gateway pods exposes: istiod would listen on that Service's target port, which the add-on's own Service decides", s.GetPort().GetNumber())
	case tls.GetMode().String() != "SIMPLE":
		return fmt.Errorf("TLS mode %s, want SIMPLE (the gateway ends TLS with its certificate)", tls.GetMode())
	case tls.GetCredentialName() == "" || tls.GetCredentialName() != m.value("gateway.credentialName"):
		return fmt.Errorf("credentialName %q, want the chart's gateway.credentialName", tls.GetCredentialName())
	case tls.GetMinProtocolVersion().String() != "TLSV1_2" && tls.GetMinProtocolVersion().String() != "TLSV1_3":
		return fmt.Errorf("minProtocolVersion %s, want TLSV1_2 or later", tls.GetMinProtocolVersion())
	case len(s.GetHosts()) != 1 || strings.Contains(s.GetHosts()[0], "*"):
		return fmt.Errorf("hosts %v, want the one name opstatus uses", s.GetHosts())
	}
	u, err := url.Parse(fmt.Sprint(f.params["clusterServiceUrl"]))
	if err != nil || u.Scheme != "https" || u.Hostname() != s.GetHosts()[0] || (u.Port() != "" && u.Port() != "443") {
		return fmt.Errorf("opstatus's example clusterServiceUrl %v is not https://%s", f.params["clusterServiceUrl"], s.GetHosts()[0])
	}
	return nil
}

// checkMeshVirtualService: the gateway's host, routed to Cluster Service's
// Service on port 8000 and nowhere else.
func checkMeshVirtualService(m *mesh) error {
	vs := m.virtualService
	switch {
	case vs == nil:
		return errors.New("no VirtualService")
	case m.gateway == nil:
		return errors.New("no Gateway")
	case !slices.Equal(vs.Spec.GetGateways(), []string{m.gateway.Namespace + "/" + m.gateway.Name}):
		return fmt.Errorf("VirtualService binds to %v, want the Gateway %s/%s alone", vs.Spec.GetGateways(), m.gateway.Namespace, m.gateway.Name)
	case !slices.Equal(vs.Spec.GetHosts(), m.gateway.Spec.GetServers()[0].GetHosts()):
		return fmt.Errorf("VirtualService hosts %v, not the Gateway's %v", vs.Spec.GetHosts(), m.gateway.Spec.GetServers()[0].GetHosts())
	case len(vs.Spec.GetHttp()) == 0:
		return errors.New("no HTTP route")
	}
	if err := onlyFields("VirtualService", &vs.Spec, "hosts", "gateways", "exportTo", "http"); err != nil {
		return err
	}
	ns, err := m.csNamespace()
	if err != nil {
		return err
	}
	want := csService + "." + ns + ".svc.cluster.local"
	for i, r := range vs.Spec.GetHttp() {
		if err := onlyFields(fmt.Sprintf("HTTP route %d", i), r, "match", "route", "name"); err != nil {
			return err
		}
		if len(r.GetRoute()) != 1 {
			return fmt.Errorf("HTTP route %d has %d destinations, want Cluster Service alone", i, len(r.GetRoute()))
		}
		d := r.GetRoute()[0].GetDestination()
		if d.GetHost() != want || d.GetPort().GetNumber() != csPort || d.GetSubset() != "" {
			return fmt.Errorf("HTTP route %d goes to %s port %d, want %s port %d", i, d.GetHost(), d.GetPort().GetNumber(), want, csPort)
		}
	}
	return nil
}

// checkMeshRequestAuthn: at the gateway's pods, Entra ID v1.0 tokens of one
// tenant for one audience, the keys of the same tenant, the token not
// passed on to Cluster Service.
func checkMeshRequestAuthn(m *mesh) error {
	ra := m.requestAuthn
	switch {
	case ra == nil:
		return errors.New("no RequestAuthentication")
	case ra.Namespace != m.value("gateway.namespace"):
		return fmt.Errorf("RequestAuthentication in namespace %q, not the gateway's %q: tokens would not be validated where the policy reads them", ra.Namespace, m.value("gateway.namespace"))
	case !mapsEqual(ra.Spec.GetSelector().GetMatchLabels(), m.gatewayLabels()):
		return fmt.Errorf("RequestAuthentication selects %v, not the internal gateway's pods %v", ra.Spec.GetSelector().GetMatchLabels(), m.gatewayLabels())
	case len(ra.Spec.GetJwtRules()) != 1:
		return fmt.Errorf("%d JWT rules, want one", len(ra.Spec.GetJwtRules()))
	}
	r := ra.Spec.GetJwtRules()[0]
	if err := onlyFields("the JWT rule", r, "issuer", "jwksUri", "audiences"); err != nil {
		return fmt.Errorf("%w (forwardOriginalToken would hand the Entra token to Cluster Service, which takes none)", err)
	}
	is := v1Issuer.FindStringSubmatch(r.GetIssuer())
	if is == nil || !guid.MatchString(is[3]) {
		return fmt.Errorf("issuer %q is not an Entra ID v1.0 issuer https://<STS>/<tenant GUID>/", r.GetIssuer())
	}
	if want := strings.TrimSuffix(r.GetIssuer(), "/") + "/discovery/v2.0/keys"; r.GetJwksUri() != want {
		return fmt.Errorf("jwksUri %q, want the tenant's keys %s", r.GetJwksUri(), want)
	}
	if !slices.Equal(r.GetAudiences(), []string{m.value("opstatus.audience")}) {
		return fmt.Errorf("audiences %v, want the chart's opstatus.audience alone", r.GetAudiences())
	}
	return nil
}

// checkMeshAudience: the audience the gateway accepts is the one opstatus's
// template asks tokens for.
func checkMeshAudience(m *mesh, f meshFixture) error {
	want, err := templateAudiences(f.template, f.params)
	if err != nil {
		return err
	}
	for _, w := range want {
		if got := m.value("opstatus.audience"); got != w {
			return fmt.Errorf("the chart's audience %q is not the template's clusterServiceAudience %q", got, w)
		}
	}
	return checkAudienceForm(m.value("opstatus.audience"))
}

var (
	clientID      = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	guidURIPrefix = regexp.MustCompile(`^api://[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(/|$)`)
)

// checkAudienceForm: an application's client ID, or an identifier URI
// api://<tenant ID or app ID>[/…]. Where Entra's identifier-URI restriction
// is on (uriAdditionWithoutUniqueTenantIdentifier) an application cannot
// add a URI without a tenant ID, its app ID or a verified domain; these
// checks cannot tell a verified domain, so they take none.
func checkAudienceForm(aud string) error {
	if clientID.MatchString(aud) || guidURIPrefix.MatchString(aud) {
		return nil
	}
	return fmt.Errorf("audience %q is neither a client ID nor api://<tenant or app ID>/…: Entra's identifier-URI restriction refuses such a URI on the application", aud)
}

// checkMeshGatewayPolicy: at the gateway's pods, ALLOW one rule: opstatus's
// request principal, its oid, the audience, GET on opstatus's paths.
func checkMeshGatewayPolicy(m *mesh, f meshFixture) error {
	p, err := m.gatewayPolicy()
	if err != nil {
		return err
	}
	if err := policyShape(p, m.gatewayLabels()); err != nil {
		return err
	}
	if m.requestAuthn == nil || len(m.requestAuthn.Spec.GetJwtRules()) != 1 {
		return errors.New("no JWT rule to take the issuer from")
	}
	id := m.value("opstatus.principalId")
	if !guid.MatchString(id) {
		return fmt.Errorf("opstatus.principalId %q is not an object ID", id)
	}
	rule := p.Spec.GetRules()[0]
	if err := onlyFields("the gateway policy's rule", rule, "from", "to", "when"); err != nil {
		return err
	}
	src := rule.GetFrom()[0].GetSource()
	if err := onlyFields("the gateway policy's source", src, "requestPrincipals"); err != nil {
		return err
	}
	want := m.requestAuthn.Spec.GetJwtRules()[0].GetIssuer() + "/" + id
	if !slices.Equal(src.GetRequestPrincipals(), []string{want}) {
		return fmt.Errorf("requestPrincipals %v, want opstatus's identity alone, %s (iss/sub)", src.GetRequestPrincipals(), want)
	}
	conditions := map[string][]string{}
	for _, c := range rule.GetWhen() {
		if err := onlyFields("a condition", c, "key", "values"); err != nil {
			return err
		}
		conditions[c.GetKey()] = c.GetValues()
	}
	wantWhen := map[string][]string{
		"request.auth.claims[oid]": {id},
		"request.auth.audiences":   {m.value("opstatus.audience")},
	}
	if fmt.Sprint(conditions) != fmt.Sprint(wantWhen) {
		return fmt.Errorf("conditions %v, want %v", conditions, wantWhen)
	}
	return checkOperation("the gateway policy", rule, f, "methods", "paths")
}

// checkMeshClusterServicePolicy: at Cluster Service's pods, ALLOW one rule:
// the internal gateway's service account over mutual TLS, port 8000, GET on
// opstatus's paths.
func checkMeshClusterServicePolicy(m *mesh, f meshFixture) error {
	if _, err := m.csNamespace(); err != nil {
		return err
	}
	p, err := m.clusterServicePolicy()
	if err != nil {
		return err
	}
	if err := policyShape(p, map[string]string{"app": csAppLabel}); err != nil {
		return err
	}
	rule := p.Spec.GetRules()[0]
	if err := onlyFields("the Cluster Service policy's rule", rule, "from", "to"); err != nil {
		return err
	}
	src := rule.GetFrom()[0].GetSource()
	if err := onlyFields("the Cluster Service policy's source", src, "principals"); err != nil {
		return err
	}
	want := fmt.Sprintf("%s/ns/%s/sa/%s", meshTrustDomain, m.value("gateway.namespace"), m.value("gateway.serviceAccount"))
	if !slices.Equal(src.GetPrincipals(), []string{want}) {
		return fmt.Errorf("principals %v, want the internal gateway's alone, %s", src.GetPrincipals(), want)
	}
	if ports := rule.GetTo()[0].GetOperation().GetPorts(); !slices.Equal(ports, []string{fmt.Sprint(csPort)}) {
		return fmt.Errorf("ports %v, want Cluster Service's %d alone", ports, csPort)
	}
	return checkOperation("the Cluster Service policy", rule, f, "methods", "paths", "ports")
}

// policyShape: an ALLOW policy on the given pods with one rule of one
// source and one operation.
func policyShape(p *securityv1.AuthorizationPolicy, labels map[string]string) error {
	s := &p.Spec
	switch {
	case s.GetAction().String() != "ALLOW":
		return fmt.Errorf("policy %s: action %s, want ALLOW", p.Name, s.GetAction())
	case !mapsEqual(s.GetSelector().GetMatchLabels(), labels):
		return fmt.Errorf("policy %s selects %v, want %v", p.Name, s.GetSelector().GetMatchLabels(), labels)
	case len(s.GetRules()) != 1:
		return fmt.Errorf("policy %s: %d rules, want one", p.Name, len(s.GetRules()))
	case len(s.GetRules()[0].GetFrom()) != 1 || len(s.GetRules()[0].GetTo()) != 1:
		return fmt.Errorf("policy %s: want one source and one operation", p.Name)
	}
	return onlyFields("policy "+p.Name, s, "selector", "action", "rules")
}

// checkOperation: GET alone, and the paths exactly those opstatus's client
// requests: each request it sends matched the way Istio matches, none of the
// paths next to them admitted, and no path that no request needs.
func checkOperation(what string, rule *securityapi.Rule, f meshFixture, allowed ...string) error {
	op := rule.GetTo()[0].GetOperation()
	if err := onlyFields(what+"'s operation", op, allowed...); err != nil {
		return err
	}
	if !slices.Equal(op.GetMethods(), []string{"GET"}) {
		return fmt.Errorf("%s: methods %v, want GET alone", what, op.GetMethods())
	}
	paths := op.GetPaths()
	admits := func(p string) bool {
		return slices.ContainsFunc(paths, func(pattern string) bool { return istioPathMatch(pattern, p) })
	}
	var calls []string
	for _, r := range f.requests {
		if r.method != "GET" {
			return fmt.Errorf("opstatus sends %s, which %s does not admit", r, what)
		}
		calls = append(calls, r.path)
	}
	for _, c := range f.concrete {
		if !admits(c) {
			return fmt.Errorf("%s does not admit GET %s, which opstatus sends", what, c)
		}
	}
	for _, n := range nearMisses(f.concrete, calls) {
		if admits(n) {
			return fmt.Errorf("%s admits GET %s, which opstatus never sends", what, n)
		}
	}
	for _, p := range paths {
		if !slices.Contains(calls, p) {
			return fmt.Errorf("%s admits %s, not a path opstatus requests", what, p)
		}
	}
	return nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func loadMesh(t *testing.T) meshFixture {
	t.Helper()
	var f meshFixture
	var err error
	f.chart, err = readMeshChart()
	require.NoError(t, err)
	f.template, err = armeval.ReadJSON(templateFile)
	require.NoError(t, err)
	file, err := armeval.ReadJSON(parametersFile)
	require.NoError(t, err)
	f.params, err = armeval.ParameterValues(file)
	require.NoError(t, err)
	f.requests, f.concrete, err = opstatusRequests()
	require.NoError(t, err)
	return f
}

// runMeshChecks decodes a chart and runs every check, returning the first
// failure.
func runMeshChecks(f meshFixture) error {
	m, err := decodeMesh(f.chart)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	for _, c := range meshChecks {
		if err := c.check(m, f); err != nil && !errors.Is(err, errNoAudienceParameter) {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

func TestMeshPassesEveryCheck(t *testing.T) {
	f := loadMesh(t)
	m, err := decodeMesh(f.chart)
	require.NoError(t, err)
	for _, c := range meshChecks {
		t.Run(c.name, func(t *testing.T) {
			err := c.check(m, f)
			if errors.Is(err, errNoAudienceParameter) {
				t.Skip(err.Error() + ": the chart's audience is compared once it does")
			}
			require.NoError(t, err)
		})
	}
}

// TestOpstatusRequestsCoverEveryForm: every internalId form leads the
// client to at least one request, so the derivation the policy checks rest
// on sees every kind of object.
func TestOpstatusRequestsCoverEveryForm(t *testing.T) {
	forms, err := internalIDForms()
	require.NoError(t, err)
	reqs, concrete, err := opstatusRequests()
	require.NoError(t, err)
	for _, form := range forms {
		prefix := templated(placeholders(form))
		require.True(t, slices.ContainsFunc(reqs, func(r csRequest) bool {
			return r.path == prefix || strings.HasPrefix(r.path, prefix+"/")
		}), "no request for %s", form)
	}
	for _, r := range reqs {
		t.Log(r)
	}
	require.NotEmpty(t, concrete)
}

// TestIstioPathMatch holds the model of Istio's path matching to the
// examples Istio documents for Operation.paths.
func TestIstioPathMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/foo/{*}", "/foo/bar", true},
		{"/foo/{*}", "/foo/bar/baz", false},
		{"/foo/{*}", "/foo/", false},
		{"/foo/{**}/", "/foo/bar/", true},
		{"/foo/{**}/", "/foo/bar/baz.txt", true},
		{"/foo/{**}/", "/foo//", true},
		{"/foo/{*}/bar/{**}", "/foo/buzz/bar/", true},
		{"/foo/{*}/bar/{**}", "/foo/buzz/bar/baz", true},
		{"/info*", "/info/x", true},
		{"/info*", "/inf", false},
		{"*/status", "/a/status", true},
		{"/data", "/data", true},
		{"/data", "/data/", false},
		{"*", "/anything", true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, istioPathMatch(tc.pattern, tc.path), "%s against %s", tc.pattern, tc.path)
	}
}

// TestMeshChecksFailOnBrokenCopy edits a copy of the chart the way a mistake
// would and sees the check that guards against it fail.
func TestMeshChecksFailOnBrokenCopy(t *testing.T) {
	f := loadMesh(t)
	tests := []struct {
		name string
		file string
		// old is replaced by new, and must occur exactly once.
		old, new string
		// template, when set, edits a copy of opstatus's template instead.
		template func(tmpl map[string]any)
		want     string
	}{
		{
			name: "a misspelt field in a Gateway's spec",
			file: "templates/gateway.yaml", old: "credentialName:", new: "credentialNam:",
			want: "unknown field",
		},
		{
			name: "a field under its proto name",
			file: "templates/gateway.yaml", old: "credentialName:", new: "credential_name:",
			want: "spec.servers[0].tls.credential_name: not the JSON name",
		},
		{
			name: "a misspelt field in a policy's rule",
			file: "templates/gateway-authorizationpolicy.yaml", old: "    when:", new: "    whenever:",
			want: "unknown field",
		},
		{
			name: "a misspelt field in the Service",
			file: "templates/service.yaml", old: "  loadBalancerSourceRanges:", new: "  loadBalancerSourceRange:",
			want: `unknown field "loadBalancerSourceRange"`,
		},
		{
			name: "a misspelt field in metadata",
			file: "templates/virtualservice.yaml", old: "  namespace:", new: "  namespaces:",
			want: "unknown field",
		},
		{
			name: "an Istio version these checks do not know",
			file: "templates/virtualservice.yaml", old: "networking.istio.io/v1beta1", new: "networking.istio.io/v1beta2",
			want: "networking.istio.io/v1beta2, Kind=VirtualService is not a type these checks know",
		},
		{
			name: "a value the chart does not define",
			file: "templates/service.yaml", old: ".Values.gateway.loadBalancerIP", new: ".Values.gateway.loadBalancerIp",
			want: `map has no entry for key "loadBalancerIp"`,
		},
		{
			name: "a public load balancer",
			file: "templates/service.yaml", old: `azure-load-balancer-internal: "true"`, new: `azure-load-balancer-internal: "false"`,
			want: "the load balancer is not internal",
		},
		{
			name: "a load balancer open to the whole network",
			file: "values.yaml", old: `subnetPrefix: "10.128.64.0/27"`, new: `subnetPrefix: "10.0.0.0/8"`,
			want: "is not one private subnet's prefix",
		},
		{
			name: "the load balancer on the external gateway",
			file: "templates/service.yaml", old: `istio: "{{ .Values.gateway.selector }}"`, new: `istio: aks-istio-ingressgateway-external`,
			want: "not the internal gateway's pods",
		},
		{
			name: "a plain-HTTP gateway",
			file: "templates/gateway.yaml", old: "protocol: HTTPS", new: "protocol: HTTP",
			want: `server protocol "HTTP", want HTTPS`,
		},
		{
			name: "TLS passed through to Cluster Service",
			file: "templates/gateway.yaml", old: "mode: SIMPLE", new: "mode: PASSTHROUGH",
			want: "TLS mode PASSTHROUGH",
		},
		{
			name: "a gateway for any host",
			file: "templates/gateway.yaml", old: `- "{{ .Values.gateway.host }}"`, new: `- "*"`,
			want: "want the one name opstatus uses",
		},
		{
			name: "a host opstatus's URL does not name",
			file: "values.yaml", old: `host: "api.clusters-service.int.example.internal"`, new: `host: "cs.int.example.internal"`,
			want: "clusterServiceUrl https://api.clusters-service.int.example.internal is not https://cs.int.example.internal",
		},
		{
			name: "a route to Cluster Service's metrics port",
			file: "values.yaml", old: "port: 8000", new: "port: 8080",
			want: "port 8080, want clusters-service.cluster-service.svc.cluster.local port 8000",
		},
		{
			name: "a route to another service",
			file: "templates/virtualservice.yaml", old: `host: "{{ .Values.clusterService.service }}.`, new: `host: "clusters-service-healthcheck.`,
			want: "goes to clusters-service-healthcheck.cluster-service.svc.cluster.local",
		},
		{
			name: "a route that rewrites the path",
			file: "templates/virtualservice.yaml", old: "    route:", new: "    rewrite:\n      uri: /\n    route:",
			want: "HTTP route 0 sets rewrite",
		},
		{
			name: "tokens validated at Cluster Service's sidecar, not at the gateway",
			file: "templates/requestauthentication.yaml", old: `  namespace: "{{ .Values.gateway.namespace }}"`, new: `  namespace: clusters-service`,
			want: "tokens would not be validated where the policy reads them",
		},
		{
			name: "the token forwarded to Cluster Service",
			file: "templates/requestauthentication.yaml", old: "forwardOriginalToken: false", new: "forwardOriginalToken: true",
			want: "sets forwardOriginalToken",
		},
		{
			name: "v2.0 tokens' issuer",
			file: "templates/requestauthentication.yaml", old: `issuer: "{{ .Values.entra.authority }}/"`, new: `issuer: "{{ .Values.entra.authority }}/v2.0"`,
			want: "is not an Entra ID v1.0 issuer",
		},
		{
			name: "another tenant's keys",
			file: "templates/requestauthentication.yaml", old: `jwksUri: "{{ .Values.entra.authority }}/discovery/v2.0/keys"`, new: `jwksUri: "https://login.microsoftonline.com/common/discovery/v2.0/keys"`,
			want: "want the tenant's keys",
		},
		{
			name: "a second audience",
			file: "templates/requestauthentication.yaml", old: `    - "{{ .Values.opstatus.audience }}"`, new: "    - \"{{ .Values.opstatus.audience }}\"\n    - https://management.azure.com/",
			want: "want the chart's opstatus.audience alone",
		},
		{
			name: "an audience opstatus's template does not ask for",
			template: func(tmpl map[string]any) {
				tmpl["parameters"].(map[string]any)["clusterServiceAudience"] = map[string]any{"type": "string", "defaultValue": "api://another"}
			},
			want: `the chart's audience "22222222-2222-2222-2222-222222222222" is not the template's clusterServiceAudience "api://another"`,
		},
		{
			name: "the gateway's server on the load balancer's port, not its target port",
			file: "templates/gateway.yaml", old: "number: {{ .Values.gateway.targetPort }}", new: "number: 443",
			want: "server port 443 is not the target port 8443 the load balancer sends to",
		},
		{
			name: "the load balancer sending to another port than the gateway's",
			file: "templates/service.yaml", old: "targetPort: {{ .Values.gateway.targetPort }}", new: "targetPort: 8080",
			want: "server port 8443 is not the target port 8080",
		},
		{
			name: "load balancer and gateway both on the add-on's 443",
			file: "values.yaml", old: "targetPort: 8443", new: "targetPort: 443",
			want: "server port 443 is a port a Service of the gateway pods exposes",
		},
		{
			name: "load balancer and gateway both on the add-on's status port",
			file: "values.yaml", old: "targetPort: 8443", new: "targetPort: 15021",
			want: "server port 15021 is a port a Service of the gateway pods exposes",
		},
		{
			name: "source ranges without the deny rule",
			file: "templates/service.yaml", old: "    service.beta.kubernetes.io/azure-deny-all-except-load-balancer-source-ranges: \"true\"\n", new: "",
			want: "the load balancer admits the rest of the network",
		},
		{
			name: "any valid token",
			file: "templates/gateway-authorizationpolicy.yaml", old: `- "{{ .Values.entra.authority }}//{{ .Values.opstatus.principalId }}"`, new: `- "*"`,
			want: "want opstatus's identity alone",
		},
		{
			name: "a second identity",
			file: "templates/gateway-authorizationpolicy.yaml", old: `- "{{ .Values.entra.authority }}//{{ .Values.opstatus.principalId }}"`, new: "- \"{{ .Values.entra.authority }}//{{ .Values.opstatus.principalId }}\"\n        - \"{{ .Values.entra.authority }}//22222222-2222-2222-2222-222222222222\"",
			want: "want opstatus's identity alone",
		},
		{
			name: "the principal's issuer without the slash v1.0 tokens end with",
			file: "templates/gateway-authorizationpolicy.yaml", old: `- "{{ .Values.entra.authority }}//{{ .Values.opstatus.principalId }}"`, new: `- "{{ .Values.entra.authority }}/{{ .Values.opstatus.principalId }}"`,
			want: "want opstatus's identity alone",
		},
		{
			name: "no oid condition",
			file: "templates/gateway-authorizationpolicy.yaml", old: "    - key: request.auth.claims[oid]\n      values:\n      - \"{{ .Values.opstatus.principalId }}\"\n", new: "",
			want: "conditions map[request.auth.audiences",
		},
		{
			name: "a gateway policy that denies instead",
			file: "templates/gateway-authorizationpolicy.yaml", old: "action: ALLOW", new: "action: DENY",
			want: "action DENY, want ALLOW",
		},
		{
			name: "a gateway policy on the wrong pods",
			file: "templates/gateway-authorizationpolicy.yaml", old: `istio: "{{ .Values.gateway.selector }}"`, new: `istio: aks-istio-ingressgateway-external`,
			want: "policy opstatus-only selects",
		},
		{
			name: "POST as well as GET",
			file: "templates/_helpers.tpl", old: `methods: ["GET"]`, new: `methods: ["GET", "POST"]`,
			want: "methods [GET POST], want GET alone",
		},
		{
			name: "every method, notMethods",
			file: "templates/_helpers.tpl", old: `methods: ["GET"]`, new: "methods: [\"GET\"]\n        notMethods: [\"DELETE\"]",
			want: "sets notMethods",
		},
		{
			name: "a path prefix instead of templates",
			file: "templates/_helpers.tpl", old: `- "/api/clusters_mgmt/v1/clusters/{*}"` + "\n", new: `- "/api/clusters_mgmt/v1/clusters/*"` + "\n",
			want: "admits GET /api/clusters_mgmt/v1/clusters/sample-1/, which opstatus never sends",
		},
		{
			name: "a path opstatus reads left out",
			file: "templates/_helpers.tpl", old: `        - "/api/aro_hcp/v1alpha1/clusters/{*}/node_pools/{*}/status"` + "\n", new: "",
			want: "does not admit GET /api/aro_hcp/v1alpha1/clusters/sample-1/node_pools/sample-2/status",
		},
		{
			name: "the clusters_mgmt node pool object left out",
			file: "templates/_helpers.tpl", old: `        - "/api/clusters_mgmt/v1/clusters/{*}/node_pools/{*}"` + "\n", new: "",
			want: "does not admit GET /api/clusters_mgmt/v1/clusters/sample-1/node_pools/sample-2, which opstatus sends",
		},
		{
			name: "a node pool path in the API that has none",
			file: "templates/_helpers.tpl", old: `        - "/api/aro_hcp/v1alpha1/clusters/{*}/node_pools/{*}/status"` + "\n", new: `        - "/api/aro_hcp/v1alpha1/clusters/{*}/node_pools/{*}/status"` + "\n" + `        - "/api/clusters_mgmt/v1/clusters/{*}/node_pools/{*}/status"` + "\n",
			want: "admits GET /api/clusters_mgmt/v1/clusters/sample-1/node_pools/sample-2/status, which opstatus never sends",
		},
		{
			name: "a path opstatus never requests",
			file: "templates/_helpers.tpl", old: `        - "/api/aro_hcp/v1alpha1/clusters/{*}/status"` + "\n", new: `        - "/api/aro_hcp/v1alpha1/clusters/{*}/status"` + "\n" + `        - "/api/aro_hcp/v1alpha1/clusters/{*}/addons"` + "\n",
			want: "admits /api/aro_hcp/v1alpha1/clusters/{*}/addons, not a path opstatus requests",
		},
		{
			name: "Cluster Service open to the whole gateway namespace",
			file: "templates/clusters-service-authorizationpolicy.yaml", old: "        principals:\n        - \"cluster.local/ns/{{ .Values.gateway.namespace }}/sa/{{ .Values.gateway.serviceAccount }}\"", new: "        namespaces:\n        - \"{{ .Values.gateway.namespace }}\"",
			want: "sets namespaces",
		},
		{
			name: "Cluster Service open to the external gateway",
			file: "templates/clusters-service-authorizationpolicy.yaml", old: "sa/{{ .Values.gateway.serviceAccount }}", new: "sa/aks-istio-ingressgateway-external",
			want: "want the internal gateway's alone",
		},
		{
			name: "Cluster Service's metrics port",
			file: "templates/clusters-service-authorizationpolicy.yaml", old: `ports: ["{{ .Values.clusterService.port }}"]`, new: `ports: ["8000", "8080"]`,
			want: "ports [8000 8080], want Cluster Service's 8000 alone",
		},
		{
			name: "the Cluster Service policy on every pod of its namespace",
			file: "templates/clusters-service-authorizationpolicy.yaml", old: "  selector:\n    matchLabels:\n      app: \"{{ .Values.clusterService.appLabel }}\"\n", new: "",
			want: "policy allow-opstatus-gateway selects map[]",
		},
		{
			name: "Cluster Service in a namespace ARO-HCP does not use",
			file: "values.yaml", old: "  namespace: cluster-service\n", new: "  namespace: default\n",
			want: `clusterService.namespace "default" is not one ARO-HCP runs Cluster Service in`,
		},
		{
			name: "the Cluster Service policy in the gateway's namespace",
			file: "templates/clusters-service-authorizationpolicy.yaml", old: `namespace: "{{ .Values.clusterService.namespace }}"`, new: `namespace: "{{ .Values.gateway.namespace }}"`,
			want: "2 AuthorizationPolicies in namespace aks-istio-ingress, want 1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := f
			g.chart = f.chart.copy()
			g.template = armeval.DeepCopy(f.template)
			if tc.template != nil {
				tc.template(g.template)
			}
			if tc.file != "" {
				require.Equal(t, 1, strings.Count(g.chart[tc.file], tc.old), "%s must hold %q once", tc.file, tc.old)
				g.chart[tc.file] = strings.Replace(g.chart[tc.file], tc.old, tc.new, 1)
			}
			err := runMeshChecks(g)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
