// Command lab brings up the whole stack on one machine for a person to try:
// a real kube-apiserver and etcd on loopback, two pods in network namespaces,
// the README's Service and Ingress, and perimeter serving them through a
// local HAProxy. It prints curl commands that work and tears everything down
// on Ctrl-C. Run it as root through `make lab`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

func run() error {
	bin := flag.String("perimeter", "bin/perimeter", "perimeter binary")
	httpPort := flag.Int("http-port", 8080, "port HAProxy serves HTTP on (127.0.0.1)")
	ctrlPort := flag.Int("controller-port", 6060, "port of perimeter's /healthz, /readyz, /metrics")
	statsPort := flag.Int("stats-port", 1024, "port of HAProxy's stats page")
	flag.Parse()
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, routes, HAProxy): run `sudo make lab`")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "perimeter-lab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Println("starting kube-apiserver and etcd on loopback ...")
	c, err := testenv.StartClusterCtx(ctx, filepath.Join(dir, "cluster"))
	if err != nil {
		return err
	}
	defer c.Stop()
	release, err := testenv.AcquireGuard()
	if err != nil {
		return err
	}
	defer release()

	ns := "demo"
	api := c.Admin
	bg := context.Background()
	for _, n := range []string{ns, "haproxy-controller"} {
		if _, err := api.CoreV1().Namespaces().Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var pods []*testenv.Pod
	defer func() {
		for _, p := range pods {
			_ = p.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		p, err := testenv.StartPodCtx(ctx, testenv.PodOptions{Name: fmt.Sprintf("app-%d", i), IP: fmt.Sprintf("198.18.250.%d", 10+i)})
		if err != nil {
			return err
		}
		pods = append(pods, p)
	}
	if _, err := api.CoreV1().ConfigMaps("haproxy-controller").Create(bg, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "haproxy-kubernetes-ingress"},
		Data:       map[string]string{"servers-increment": "42", "ssl-redirect": "OFF"},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.CreateServiceCtx(ctx, testenv.ServiceSpec{Namespace: ns, Name: "app",
		Endpoints: []testenv.Endpoint{pods[0].Endpoint(), pods[1].Endpoint()}}); err != nil {
		return err
	}
	svc, err := api.CoreV1().Services(ns).Get(bg, "app", metav1.GetOptions{})
	if err != nil {
		return err
	}
	svc.Annotations = map[string]string{
		"haproxy.org/check": "enabled", "haproxy.org/forwarded-for": "enabled", "haproxy.org/load-balance": "roundrobin",
	}
	if _, err := api.CoreV1().Services(ns).Update(bg, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	prefix := networkingv1.PathTypePrefix
	if _, err := api.NetworkingV1().Ingresses(ns).Create(bg, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "foo.bar",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "app", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}

	cmd := exec.Command(*bin, "--external", "--kubeconfig="+c.DaemonKubeconfig, "--program=/usr/sbin/haproxy",
		"--configmap=haproxy-controller/haproxy-kubernetes-ingress",
		"--config-dir="+filepath.Join(dir, "etc"), "--runtime-dir="+filepath.Join(dir, "run"),
		"--http-bind-port="+strconv.Itoa(*httpPort), "--ipv4-bind-address=127.0.0.1", "--disable-ipv6",
		"--controller-port="+strconv.Itoa(*ctrlPort), "--stats-bind-port="+strconv.Itoa(*statsPort))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	err = testenv.Poll(ctx, time.Minute, func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("perimeter exited: %v", err)
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", *ctrlPort))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return errors.New(resp.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf(`
perimeter is serving. Try:

  curl -i -H 'Host: foo.bar' http://127.0.0.1:%[1]d/          # 200 from app-0 / app-1, round-robin
  curl -I -H 'Host: nothing.here' http://127.0.0.1:%[1]d/     # 404 from the built-in default backend
  curl -s http://127.0.0.1:%[2]d/metrics | grep perimeter_    # the daemon's metrics
  curl -s http://127.0.0.1:%[3]d/stats                        # HAProxy's stats page
  %[5]s explain --kubeconfig=%[6]s --host foo.bar --path /
  %[5]s render --kubeconfig=%[6]s               # the haproxy.cfg and maps it applies
  export KUBECONFIG=%[4]s                        # admin identity, for kubectl if installed

Ctrl-C tears everything down.
`, *httpPort, *ctrlPort, *statsPort, c.AdminKubeconfig, *bin, c.DaemonKubeconfig)
	select {
	case <-ctx.Done():
		fmt.Println("\ntearing down ...")
	case err := <-exited:
		return fmt.Errorf("perimeter exited: %v", err)
	}
	return nil
}
