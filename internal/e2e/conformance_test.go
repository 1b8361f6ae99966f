package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/apis/v1alpha2"
	"sigs.k8s.io/gateway-api/apis/v1alpha3"
	"sigs.k8s.io/gateway-api/apis/v1beta1"
	xv1alpha1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/roundtripper"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
	sigsyaml "sigs.k8s.io/yaml"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
	"github.com/perimeter-ingress/perimeter/internal/testenv/echo"
)

// The conformance bed's addresses, all inside the edge namespace the test
// creates: the edge's address (HAProxy binds it on ports 80 and 443), the
// addresses it gives Gateways (--gateway-addresses, .81 to .95 of the
// /28 of the edge's) and the pool the suite's pods get their addresses
// from.
var (
	conformanceGatewayAddr  = netip.MustParseAddr("198.51.100.80")
	conformanceGatewayPool  = netip.MustParsePrefix("198.51.100.80/28")
	conformancePodPool      = netip.MustParsePrefix("198.18.240.0/20")
	conformanceGatewayPorts = "5300,8000-8999"
)

// conformanceFeatures is what Perimeter claims: exactly what it
// implements (docs/gateway-api.md). Named, not left empty: the suite would
// then read them from the GatewayClass status.
var conformanceFeatures = []features.FeatureName{
	features.SupportGateway,
	features.SupportHTTPRoute,
	features.SupportReferenceGrant,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteSchemeRedirect,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteRequestMirror,
	features.SupportHTTPRouteRequestMultipleMirrors,
	features.SupportHTTPRouteRequestPercentageMirror,
	features.SupportGRPCRoute,
	features.SupportGRPCRouteNamedRouteRule,
	features.SupportTLSRoute,
	features.SupportTCPRoute,
}

// conformanceSkips are the suite's tests this bed cannot run, with why.
// docs/gateway-api.md lists them.
var conformanceSkips = map[string]string{}

// conformanceSubset is what `make test` runs: every test of the suite
// Perimeter passes (GATEWAY-HTTP core and extended, GATEWAY-GRPC,
// GATEWAY-TLS and GATEWAY-TCP core), in about three minutes.
// The full suite runs with PERIMETER_CONFORMANCE=full (`make conformance`).
var conformanceSubset = []string{
	"GRPCExactMethodMatching",
	"GRPCRouteHeaderMatching",
	"GRPCRouteListenerHostnameMatching",
	"GRPCRouteNamedRule",
	"GRPCRouteWeight",
	"GatewayClassObservedGenerationBump",
	"GatewayInvalidRouteKind",
	"GatewayInvalidTLSConfiguration",
	"GatewayListenerUnsupportedProtocol",
	"GatewayModifyListeners",
	"GatewayObservedGenerationBump",
	"GatewaySecretInvalidReferenceGrant",
	"GatewaySecretMissingReferenceGrant",
	"GatewaySecretReferenceGrantAllInNamespace",
	"GatewaySecretReferenceGrantSpecific",
	"GatewayWithAttachedRoutes",
	"HTTPRoute303Redirect",
	"HTTPRoute307Redirect",
	"HTTPRoute308Redirect",
	"HTTPRouteBackendProtocolH2C",
	"HTTPRouteCrossNamespace",
	"HTTPRouteExactPathMatching",
	"HTTPRouteHTTPSListener",
	"HTTPRouteHeaderMatching",
	"HTTPRouteHostnameIntersection",
	"HTTPRouteInvalidBackendRefUnknownKind",
	"HTTPRouteInvalidCrossNamespaceBackendRef",
	"HTTPRouteInvalidCrossNamespaceParentRef",
	"HTTPRouteInvalidNonExistentBackendRef",
	"HTTPRouteInvalidParentRefNotMatchingSectionName",
	"HTTPRouteInvalidParentRefSectionNameNotMatchingPort",
	"HTTPRouteListenerPortMatching",
	"HTTPRouteInvalidReferenceGrant",
	"HTTPRouteListenerHostnameMatching",
	"HTTPRouteMatching",
	"HTTPRouteMatchingAcrossRoutes",
	"HTTPRouteMethodMatching",
	"HTTPRouteMultipleGateways",
	"HTTPRouteNoBackendRefs",
	"HTTPRouteObservedGenerationBump",
	"HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
	"HTTPRoutePathMatchOrder",
	"HTTPRouteQueryParamMatching",
	"HTTPRouteRequestMirror",
	"HTTPRouteRequestMultipleMirrors",
	"HTTPRouteRequestPercentageMirror",
	"HTTPRouteRedirectHostAndStatus",
	"HTTPRouteRedirectPath",
	"HTTPRouteRedirectPort",
	"HTTPRouteRedirectScheme",
	"HTTPRouteReferenceGrant",
	"HTTPRouteRequestHeaderModifier",
	"HTTPRouteResponseHeaderModifier",
	"HTTPRouteRewriteHost",
	"HTTPRouteRewritePath",
	"HTTPRouteServiceTypes",
	"HTTPRouteSimpleSameNamespace",
	"HTTPRouteWeight",
	"TCPRouteInvalidBackendRefNonexistent",
	"TCPRouteInvalidCrossNamespaceBackendRef",
	"TCPRouteInvalidNonTCPListener",
	"TCPRouteMultipleRoutesAttachment",
	"TCPRouteParentRefAttachAll",
	"TCPRouteParentRefPortAndSectionName",
	"TCPRouteReferenceGrant",
	"TCPRouteWeightedRouting",
	"TLSRouteHostnameIntersection",
	"TLSRouteInvalidBackendRefNonexistent",
	"TLSRouteInvalidBackendRefUnknownKind",
	"TLSRouteInvalidNoMatchingListener",
	"TLSRouteInvalidNoMatchingListenerHostname",
	"TLSRouteInvalidReferenceGrant",
	"TLSRouteListenerPassthroughSupportedKinds",
	"TLSRouteListenerTerminateNotSupported",
	"TLSRouteSimpleSameNamespace",
}

// TestGatewayConformance runs the Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, unmodified, through its Go API)
// against the daemon and HAProxy. The test bed stands in for the kubelet
// and the controller-manager (testenv.Workloads), and one echo server
// answers for all of the suite's pods; everything that carries traffic
// lives in a network namespace the test creates.
func TestGatewayConformance(t *testing.T) {
	e := newEnv(t)
	gw := e.gatewayClient()
	edge := testenv.NewNetns(t, "gw-conformance")
	nl, err := edge.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(conformanceGatewayAddr, 32))}); err != nil {
		t.Fatal(err)
	}
	// Every pod address and every Gateway address is local in the edge
	// namespace (AnyIP): HAProxy connects to the echo servers and the
	// suite's requests reach HAProxy without links or routes.
	for _, p := range []netip.Prefix{conformancePodPool, conformanceGatewayPool} {
		if err := edge.AnyIP(p); err != nil {
			t.Fatal(err)
		}
	}
	forwardInto(t, edge, e.c.Host)
	routeGatewayFromRoot(t, edge)

	pods := &echo.Pods{}
	streams := startEchoStreams(t, edge, e.c.Admin, pods, echo.Handler(pods, echoPlainPort))
	for _, s := range []struct {
		port int
		h2c  bool
	}{{3000, false}, {3001, true}} {
		var ln net.Listener
		if err := edge.Do(func() (err error) {
			ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", s.port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if s.port == echoPlainPort {
			// Port 3000 is shared, as in the suite's pods: TCP echo pods
			// first, then gRPC by its preface, then HTTP/1.1.
			ln = grpcBesideHTTP(t, streams.plain(ln), pods)
		}
		srv := echo.NewServer(echo.Handler(pods, s.port), s.h2c)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	namespaces := []string{suite.InfrastructureNamespace, suite.AppBackendNamespace, suite.WebBackendNamespace}
	work := testenv.StartWorkloads(t, e.c, testenv.WorkloadOptions{Namespaces: namespaces, Pool: conformancePodPool, Pods: pods})

	ctx := context.Background()
	controller, class := "perimeter.io/conformance", "perimeter-conformance"
	if _, err := gw.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec:       gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(controller)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.GatewayV1().GatewayClasses().Delete(ctx, class, metav1.DeleteOptions{}) })

	e.prefix = []string{"ip", "netns", "exec", edge.Name}
	addr := conformanceGatewayAddr.String()
	args := []string{"--gateway-controller=" + controller,
		"--http-bind-port=80", "--https-bind-port=443",
		"--ipv4-bind-address=" + addr, "--publish-address=" + addr,
		"--gateway-addresses=" + conformanceGatewayAddr.Next().String() + "-" + lastAddr(conformanceGatewayPool).String(),
		"--gateway-listener-ports=" + conformanceGatewayPorts,
		"--log=info"}
	for _, ns := range namespaces {
		args = append(args, "--namespace-whitelist="+ns)
	}
	d := e.launchDaemon(args...)
	dial := nsDialer(edge)
	ctrl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	testenv.Eventually(t, 60*time.Second, func() error {
		select {
		case <-d.done:
			t.Fatalf("daemon exited: %v\n%s", d.exitErr, tail(d.out.String(), 40))
		default:
		}
		resp, err := ctrl.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", d.ctrlPort))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})

	opts := conformanceOptions(t, e, class, dial)
	full := os.Getenv("PERIMETER_CONFORMANCE") == "full"
	run := tests.ConformanceTests
	if !full {
		run = slices.DeleteFunc(slices.Clone(run), func(ct suite.ConformanceTest) bool {
			return !slices.Contains(conformanceSubset, ct.ShortName)
		})
		if len(run) != len(conformanceSubset) {
			t.Fatalf("conformanceSubset names %d tests, the suite has %d of them", len(conformanceSubset), len(run))
		}
	}
	cs, err := suite.NewConformanceTestSuite(opts)
	if err != nil {
		t.Fatal(err)
	}
	// The suite's report is ready once Run's own cleanup ran: this one,
	// registered first, runs after it.
	t.Cleanup(func() { conformanceReport(t, cs, full) })
	cs.Setup(t, run)
	if err := work.Err(); err != nil {
		t.Errorf("workloads: %v", err)
	}
	if err := cs.Run(t, run); err != nil {
		t.Fatal(err)
	}
}

// conformanceReport logs the report's summary, adds it to the test report
// and, with $PERIMETER_CONFORMANCE_REPORT, writes the suite's report YAML
// there.
func conformanceReport(t *testing.T, cs *suite.ConformanceTestSuite, full bool) {
	report, err := cs.Report()
	if err != nil {
		t.Error(err)
		return
	}
	summary := conformanceSummary(report)
	t.Logf("conformance report summary:\n%s", summary)
	kind := "subset"
	if full {
		kind = "full"
	}
	appendTestReport(t, fmt.Sprintf("Gateway API conformance (%s):\n%s", kind, indent(summary)))
	if path := os.Getenv("PERIMETER_CONFORMANCE_REPORT"); path != "" {
		out, err := sigsyaml.Marshal(report)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(path), 0o755)
		}
		if err == nil {
			err = os.WriteFile(path, out, 0o644)
		}
		if err != nil {
			t.Error(err)
			return
		}
		t.Logf("conformance report written to %s", path)
	}
	if !full {
		// The subset is chosen to pass: every test in it must have run
		// and passed (a failure already failed its subtest).
		for _, p := range report.ProfileReports {
			if p.Core.Result != confv1.Success {
				t.Errorf("profile %s core: %s", p.Name, p.Core.Result)
			}
		}
	}
}

// conformanceOptions: the suite's options for this bed. Requests go to the
// Gateway address inside the edge namespace.
func conformanceOptions(t *testing.T, e *env, class string, dial func(context.Context, string, string) (net.Conn, error)) suite.ConformanceOptions {
	t.Helper()
	// controller-runtime's client wants a logger or complains; the suite
	// itself logs through the test.
	ctrllog.SetLogger(logr.Discard())
	scheme := kubescheme.Scheme
	for _, add := range []func(*runtime.Scheme) error{gwv1.Install, v1beta1.Install, v1alpha2.Install, v1alpha3.Install, xv1alpha1.Install, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	clientOptions := crclient.Options{Scheme: scheme}
	c, err := crclient.New(e.c.AdminConfig, clientOptions)
	if err != nil {
		t.Fatal(err)
	}
	timeouts := config.DefaultTimeoutConfig()
	// Between tests the suite waits this long for stray requests of the
	// previous one to drain; this bed has none in flight.
	timeouts.TestIsolation = time.Millisecond
	// The suite's waits allow for pulling images and provisioning load
	// balancers; here everything converges in seconds, and a test of what
	// Perimeter lacks then fails in half a minute instead of several.
	capDurations(&timeouts, 30*time.Second)
	var skips []string
	for name := range conformanceSkips {
		skips = append(skips, name)
	}
	sort.Strings(skips)
	version := os.Getenv("PERIMETER_VERSION")
	if version == "" {
		version = "dev"
	}
	return suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     class,
			CleanupBaseResources: false,
			CleanupTestResources: true,
			SupportedFeatures:    conformanceFeatures,
			SkipTests:            skips,
			TimeoutConfig:        timeouts,
			Implementation: confv1.Implementation{
				Organization: "perimeter-ingress",
				Project:      "perimeter",
				URL:          "https://github.com/perimeter-ingress/perimeter",
				Version:      version,
				Contact:      []string{"https://github.com/perimeter-ingress/perimeter/issues"},
			},
			ConformanceProfiles: []suite.ConformanceProfileName{suite.GatewayHTTPConformanceProfileName,
				suite.GatewayGRPCConformanceProfileName, suite.GatewayTLSConformanceProfileName,
				suite.GatewayTCPConformanceProfileName},
		},
		Client:        c,
		ClientOptions: clientOptions,
		Clientset:     e.c.Admin,
		RestConfig:    rest.CopyConfig(e.c.AdminConfig),
		RoundTripper:  &nsRoundTripper{&roundtripper.DefaultRoundTripper{TimeoutConfig: timeouts, CustomDialContext: dial}, dial},
		GRPCClient:    newNSGRPCClient(t, dial),
		ManifestFS:    []fs.FS{&conformance.Manifests},
	}
}

// capDurations lowers every duration field of *v above max to max.
func capDurations(v any, max time.Duration) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		if d, ok := f.Interface().(time.Duration); ok && d > max {
			f.Set(reflect.ValueOf(max))
		}
	}
}

// conformanceSummary: per profile, the core and extended results with
// their counts, and the names of failed and skipped tests.
func conformanceSummary(r *confv1.ConformanceReport) string {
	var b strings.Builder
	for _, p := range r.ProfileReports {
		fmt.Fprintf(&b, "%s core: %s, %d passed, %d failed, %d skipped", p.Name, p.Core.Result,
			p.Core.Statistics.Passed, p.Core.Statistics.Failed, p.Core.Statistics.Skipped)
		if len(p.Core.FailedTests) > 0 {
			fmt.Fprintf(&b, " (failed: %s)", strings.Join(p.Core.FailedTests, ", "))
		}
		if len(p.Core.SkippedTests) > 0 {
			fmt.Fprintf(&b, " (skipped: %s)", strings.Join(p.Core.SkippedTests, ", "))
		}
		b.WriteString("\n")
		if p.Extended != nil {
			fmt.Fprintf(&b, "%s extended: %s, %d passed, %d failed, %d skipped; supported %v, unsupported %d features",
				p.Name, p.Extended.Result, p.Extended.Statistics.Passed, p.Extended.Statistics.Failed, p.Extended.Statistics.Skipped,
				p.Extended.SupportedFeatures, len(p.Extended.UnsupportedFeatures))
			if len(p.Extended.FailedTests) > 0 {
				fmt.Fprintf(&b, " (failed: %s)", strings.Join(p.Extended.FailedTests, ", "))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// appendTestReport adds lines to $PERIMETER_TEST_REPORT, which `make test`
// prints: go test shows nothing of a package that passes.
func appendTestReport(t *testing.T, s string) {
	path := os.Getenv("PERIMETER_TEST_REPORT")
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Error(err)
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Error(err)
	}
}

// nsRoundTripper sends every request of the suite through dial. The suite's
// own round tripper uses its CustomDialContext for HTTP/1.1 only: its h2c
// and h2 transports dial the machine's network, where the Gateway address
// is not ours, so those requests are made here with the same capture.
type nsRoundTripper struct {
	*roundtripper.DefaultRoundTripper
	dial func(context.Context, string, string) (net.Conn, error)
}

func (n *nsRoundTripper) CaptureRoundTrip(r roundtripper.Request) (*roundtripper.CapturedRequest, *roundtripper.CapturedResponse, error) {
	switch r.Protocol {
	case roundtripper.H2CPriorKnowledgeProtocol:
	case roundtripper.H2Protocol:
		return nil, nil, fmt.Errorf("%s requests are not sent from the test bed", r.Protocol)
	default:
		return n.DefaultRoundTripper.CaptureRoundTrip(r)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{DialContext: n.dial, Protocols: &protocols}
	defer transport.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), n.TimeoutConfig.RequestTimeout)
	defer cancel()
	method := cmp.Or(r.Method, http.MethodGet)
	var body io.Reader
	if r.Body != "" {
		body = strings.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.URL.String(), body)
	if err != nil {
		return nil, nil, err
	}
	if r.Host != "" {
		req.Host = r.Host
	}
	for name, v := range r.Headers {
		req.Header.Set(name, v[0])
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	captured := &roundtripper.CapturedRequest{Method: method}
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(data, captured); err != nil {
			return nil, nil, fmt.Errorf("unexpected error reading response: %w", err)
		}
	}
	return captured, &roundtripper.CapturedResponse{StatusCode: resp.StatusCode, ContentLength: resp.ContentLength,
		Protocol: resp.Proto, Headers: resp.Header}, nil
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	for n := a.Next(); n.IsValid() && p.Contains(n); n = n.Next() {
		a = n
	}
	return a
}
