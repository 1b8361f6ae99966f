package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// calicoResources are what the CRD manifest serves, and what the test bed
// waits for before it creates Calico objects.
var calicoResources = []string{"ippools", "blockaffinities", "bgppeers", "bgpconfigurations"}

// InstallCalicoCRDs makes the API server serve Calico's crd.projectcalico.org/v1
// kinds, as a cluster running calico-node does, and waits until it does.
func (c *Cluster) InstallCalicoCRDs(ctx context.Context) error {
	return c.installCRDs(ctx, "calico-crds.yaml", "crd.projectcalico.org/v1")
}

// InstallCalicoV3CRDs makes the API server serve Calico's projectcalico.org/v3
// kinds as CRDs, as Calico v3.32 installed with its native v3 CRDs does
// (and nothing in crd.projectcalico.org).
func (c *Cluster) InstallCalicoV3CRDs(ctx context.Context) error {
	return c.installCRDs(ctx, "calico-v3-crds.yaml", "projectcalico.org/v3")
}

func (c *Cluster) installCRDs(ctx context.Context, manifest, gv string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if err := applyManifest(ctx, c.AdminConfig, filepath.Join(root, "internal", "testenv", "manifests", manifest)); err != nil {
		return err
	}
	return Poll(ctx, 30*time.Second, func() error {
		rl, err := c.Admin.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			return err
		}
		served := map[string]bool{}
		for _, r := range rl.APIResources {
			served[r.Name] = true
		}
		for _, r := range calicoResources {
			if !served[r] {
				return fmt.Errorf("%s in %s not served yet", r, gv)
			}
		}
		return nil
	})
}

// Exclusive holds a machine-wide lock named name until the test ends: for
// tests that use fixed addresses, so that two test binaries never use them
// at once.
func Exclusive(tb testing.TB, name string) {
	tb.Helper()
	sd, err := stateDir()
	if err != nil {
		tb.Fatal(err)
	}
	l, err := lockFile(filepath.Join(sd, name+".lock"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(l.unlock)
}

// ReadObjects reads every object of a multi-document YAML file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		js, err := utilyaml.ToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if t := bytes.TrimSpace(js); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, obj)
	}
}

// Apply creates or updates objects as the admin. Kinds map to resources
// the simple way (IPPool -> ippools), which holds for Calico's and core kinds.
func (c *Cluster) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	return applyObjects(ctx, c.AdminConfig, objs)
}

func applyObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvr, _ := meta.UnsafeGuessKindToResource(obj.GroupVersionKind())
		var ri dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := obj.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		_, err = ri.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				_, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// BlockAffinity is a confirmed crd.projectcalico.org/v1 BlockAffinity, named
// as Calico's IPAM names them (node-1-198-18-200-0-26).
func BlockAffinity(node, cidr string) *unstructured.Unstructured {
	name := node + "-" + strings.NewReplacer(".", "-", "/", "-", ":", "-").Replace(cidr)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "BlockAffinity",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"cidr": cidr, "node": node, "state": "confirmed", "deleted": "false", "type": "host"},
	}}
}
