package model

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// caseCodecs decode the built-in kinds and the Gateway API's.
var caseCodecs = func() serializer.CodecFactory {
	sch := runtime.NewScheme()
	if err := scheme.AddToScheme(sch); err != nil {
		panic(err)
	}
	if err := gwv1.Install(sch); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(sch)
}()

// controllerConfigMap is the name of the ConfigMap that golden cases treat
// as the controller ConfigMap (--configmap).
const controllerConfigMap = "haproxy-kubernetes-ingress"

// optionsPrefix starts a comment line in a case file that holds the
// case's Options as JSON, e.g. `# options: {"IngressClass": "haproxy"}`.
const optionsPrefix = "# options:"

// loadCase reads a multi-document Kubernetes YAML file into a Snapshot and
// the Options its header comment names.
func loadCase(t testing.TB, path string) (*Snapshot, Options) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, o, err := decodeCase(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s, o
}

func decodeCase(data []byte) (*Snapshot, Options, error) {
	var o Options
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, optionsPrefix); ok {
			if err := json.Unmarshal([]byte(rest), &o); err != nil {
				return nil, o, fmt.Errorf("options: %w", err)
			}
		}
	}
	s := &Snapshot{}
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	dec := caseCodecs.UniversalDeserializer()
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, o, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, o, fmt.Errorf("document %d: %w", i, err)
		}
		switch v := obj.(type) {
		case *networkingv1.Ingress:
			s.Ingresses = append(s.Ingresses, v)
		case *networkingv1.IngressClass:
			s.IngressClasses = append(s.IngressClasses, v)
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
		case *gwv1.ReferenceGrant:
			s.ReferenceGrants = append(s.ReferenceGrants, v)
		case *gwv1.TLSRoute:
			s.TLSRoutes = append(s.TLSRoutes, v)
		case *gwv1.TCPRoute:
			s.TCPRoutes = append(s.TCPRoutes, v)
		case *corev1.Namespace:
			s.Namespaces = append(s.Namespaces, v)
		case *corev1.ConfigMap:
			if v.Name == "tcp-services" {
				s.TCPServices = v
				continue
			}
			if v.Name != controllerConfigMap {
				return nil, o, fmt.Errorf("document %d: ConfigMap %s: only %s is understood", i, v.Name, controllerConfigMap)
			}
			s.ConfigMap = v
		default:
			return nil, o, fmt.Errorf("document %d: unexpected %T", i, obj)
		}
	}
	return s, o, nil
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range strings.Lines(string(doc)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line...)
		}
	}
	return out
}
