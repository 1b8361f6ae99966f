package haproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwscheme "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/scheme"

	"github.com/perimeter-ingress/perimeter/internal/model"
)

// TestFeatures runs each feature's whole path without root: Kubernetes
// objects (before.yaml, then after.yaml) through model.Build and Apply
// against the fakes. haproxy.cfg.golden is the configuration after the
// change, runtime.golden how the change reached HAProxy: the reload and
// its reason, or the Runtime API commands. -update rewrites the goldens.
func TestFeatures(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "features", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no features (%v)", err)
	}
	for _, dir := range dirs {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		t.Run(filepath.Base(dir), func(t *testing.T) { runFeature(t, dir) })
	}
}

func runFeature(t *testing.T, dir string) {
	u := newUnitDriver(t, Options{HTTPSBindPort: 443})
	before, o := loadFeature(t, filepath.Join(dir, "before.yaml"))
	if res, err := u.Apply(t.Context(), model.Build(before, o)); err != nil || !res.Reloaded {
		t.Fatalf("before.yaml: %+v, %v", res, err)
	}
	u.rt.take()
	after, o := loadFeature(t, filepath.Join(dir, "after.yaml"))
	want := model.Build(after, o)
	res, err := u.Apply(t.Context(), want)
	if err != nil {
		t.Fatalf("after.yaml: %v", err)
	}
	// Neither the build nor the driver may find fault with a feature case.
	for _, p := range append(append(want.Problems, res.Dropped...), res.Quarantined...) {
		t.Errorf("problem: %s %s: %s", p.Object, p.Reason, p.Message)
	}
	paths := strings.NewReplacer(u.opts.ConfigDir, goldenConfigDir, u.opts.RuntimeDir, goldenRunDir)
	var rt strings.Builder
	switch {
	case res.Reloaded:
		fmt.Fprintf(&rt, "reload %s: %s\n", res.ReloadReason, res.Reason)
	default:
		fmt.Fprintf(&rt, "%s\n", res.Reason)
	}
	for _, c := range u.rt.take() {
		rt.WriteString(paths.Replace(c) + "\n")
	}
	// golden reads below testdata/.
	rel, _ := filepath.Rel("testdata", dir)
	golden(t, filepath.Join(rel, "runtime.golden"), rt.String())
	golden(t, filepath.Join(rel, "haproxy.cfg.golden"), paths.Replace(readConfig(t, u.Driver)))
}

// featureOptions starts a comment line that holds model.Options as JSON.
const featureOptions = "# options:"

// loadFeature reads a multi-document Kubernetes YAML file into a Snapshot.
// The ConfigMaps are told apart by name: "perimeter" is the controller
// ConfigMap, "errorfiles" and "tcp-services" the other two. The default
// certificate is testdata/features/default.pem unless the options say.
func loadFeature(t *testing.T, path string) (*model.Snapshot, model.Options) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var o model.Options
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, featureOptions); ok {
			if err := json.Unmarshal([]byte(rest), &o); err != nil {
				t.Fatalf("%s: options: %v", path, err)
			}
		}
	}
	if o.DefaultCertificate == nil {
		if o.DefaultCertificate, err = os.ReadFile(filepath.Join("testdata", "features", "default.pem")); err != nil {
			t.Fatal(err)
		}
	}
	s := &model.Snapshot{}
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	dec := scheme.Codecs.UniversalDeserializer()
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil && bytes.Contains(doc, []byte("gateway.networking.k8s.io/")) {
			obj, _, err = gwscheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		}
		if err != nil {
			if len(bytes.TrimSpace(doc)) == 0 || !bytes.Contains(doc, []byte("kind:")) {
				continue // comments only
			}
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		switch v := obj.(type) {
		case *networkingv1.Ingress:
			s.Ingresses = append(s.Ingresses, v)
		case *corev1.Service:
			s.Services = append(s.Services, v)
		case *discoveryv1.EndpointSlice:
			s.EndpointSlices = append(s.EndpointSlices, v)
		case *corev1.Secret:
			s.Secrets = append(s.Secrets, v)
		case *gwv1.GatewayClass:
			s.GatewayClasses = append(s.GatewayClasses, v)
		case *gwv1.Gateway:
			s.Gateways = append(s.Gateways, v)
		case *gwv1.HTTPRoute:
			s.HTTPRoutes = append(s.HTTPRoutes, v)
		case *gwv1.GRPCRoute:
			s.GRPCRoutes = append(s.GRPCRoutes, v)
		case *gwv1.TLSRoute:
			s.TLSRoutes = append(s.TLSRoutes, v)
		case *gwv1.TCPRoute:
			s.TCPRoutes = append(s.TCPRoutes, v)
		case *corev1.ConfigMap:
			switch v.Name {
			case "perimeter":
				s.ConfigMap = v
			case "errorfiles":
				s.ErrorFiles = v
			case "tcp-services":
				s.TCPServices = v
			default:
				t.Fatalf("%s: ConfigMap %s: only perimeter, errorfiles and tcp-services are understood", path, v.Name)
			}
		default:
			t.Fatalf("%s: document %d: unexpected %T", path, i, obj)
		}
	}
	return s, o
}
