package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is a kube-apiserver with its etcd on loopback, with RBAC on and the
// project's packaging/rbac.yaml applied. There is no controller-manager:
// tests create Services and their EndpointSlices themselves, and deleted
// namespaces would stay Terminating, so every test takes a fresh one.
type Cluster struct {
	Dir  string // state: pki/, etcd data, *.log, *.kubeconfig
	Host string // https://127.0.0.1:port

	Admin           kubernetes.Interface // identity in system:masters
	AdminConfig     *rest.Config
	AdminKubeconfig string

	// DaemonKubeconfig is the identity CN=perimeter, bound by rbac.yaml to the
	// ClusterRole the daemon runs with in production.
	DaemonKubeconfig string
	DaemonConfig     *rest.Config

	etcd, apiserver *process
	kubelet         kubelet
	removeDir       bool
	stopOnce        sync.Once
	stopErr         error
}

// StartCluster starts a cluster for one test and stops it when the test ends,
// printing the end of the server logs if the test failed. Most packages share
// one cluster instead: see Main and SharedCluster.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	skipShortCluster(tb)
	c, err := StartClusterCtx(context.Background(), "")
	if err != nil {
		tb.Fatalf("test cluster: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("test cluster logs (%s):\n%s", c.Dir, c.LogTail(40))
		}
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

func skipShortCluster(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipped with -short: needs kube-apiserver and etcd")
	}
}

// StartClusterCtx starts a cluster whose state lives in dir (a new temporary
// directory, removed by Stop, when dir is empty). The caller must call Stop.
// ctx bounds the start, not the cluster's life.
func StartClusterCtx(ctx context.Context, dir string) (*Cluster, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	if dir == "" {
		sweepClusterDirs()
		if c.Dir, err = os.MkdirTemp("", clusterDirPrefix+strconv.Itoa(os.Getpid())+"-"); err != nil {
			return nil, fmt.Errorf("cluster dir: %w", err)
		}
		c.removeDir = true
	} else {
		if c.Dir, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("cluster dir: %w", err)
		}
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("cluster dir: %w", err)
		}
	}
	if err := c.start(ctx, bin); err != nil {
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, bin string) error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	// Free ports can be taken by someone else before our children bind them:
	// start again on other ports when that happens.
	for attempt := 1; ; attempt++ {
		err = c.startProcesses(ctx, bin, p)
		if err == nil {
			break
		}
		busy := errors.Is(err, errPortBusy)
		c.stopProcesses()
		if !busy || attempt == 3 {
			return err
		}
	}
	if err := c.makeClients(p); err != nil {
		return err
	}
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if err := applyManifest(ctx, c.AdminConfig, filepath.Join(root, "packaging", "rbac.yaml")); err != nil {
		return err
	}
	// The RBAC authorizer reads bindings from an informer: wait until it
	// knows the daemon's, so the first test does not see a spurious Forbidden.
	return Poll(ctx, 30*time.Second, func() error {
		sar, err := c.Admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: perimeterUser,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: "list", Group: "networking.k8s.io", Resource: "ingresses",
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("user %s may not list ingresses yet", perimeterUser)
		}
		return nil
	})
}

var errPortBusy = errors.New("port already in use")

const clusterDirPrefix = "perimeter-cluster-"

// sweepClusterDirs removes the temporary state directories of test binaries
// that died without stopping their cluster (their children died with them).
func sweepClusterDirs() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), clusterDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && processID(n) == "" {
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

func (c *Cluster) startProcesses(ctx context.Context, bin string, p *pki) error {
	var ports [3]int
	for i := range ports {
		port, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = port
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	var err error
	c.etcd, err = startProcess("etcd", filepath.Join(bin, "etcd"), []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--unsafe-no-fsync", // test data only: fsync dominates write latency
		// A single member elects itself only after an election timeout.
		"--heartbeat-interval=20", "--election-timeout=200",
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
	}, c.Dir)
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := waitHealthy(ctx, c.etcd, plain, etcdURL+"/health"); err != nil {
		return err
	}

	c.Host = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	c.apiserver, err = startProcess("kube-apiserver", filepath.Join(bin, "kube-apiserver"), []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file=" + p.path(pkiServingCert),
		"--tls-private-key-file=" + p.path(pkiServingKey),
		"--client-ca-file=" + p.path(pkiCACert),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.path(pkiSAPub),
		"--service-account-signing-key-file=" + p.path(pkiSAKey),
		"--service-cluster-ip-range=" + serviceIPRange,
		// Keeps default/kubernetes without endpoints, so watchers of all
		// namespaces see only test data.
		"--endpoint-reconciler-type=none",
		// No --kubelet-certificate-authority: the API server then proxies
		// pods/log to the bed's stand-in kubelet without verifying its
		// self-signed certificate, and finds it by the Node's InternalIP,
		// which the default --kubelet-preferred-address-types accept.
		"--profiling=false",
	}, c.Dir)
	if err != nil {
		return err
	}
	tlsClient, err := p.adminHTTPClient()
	if err != nil {
		return err
	}
	return waitHealthy(ctx, c.apiserver, tlsClient, c.Host+"/readyz")
}

// waitHealthy polls url until it answers 200, failing early when the process
// dies (the log says why).
func waitHealthy(ctx context.Context, p *process, client *http.Client, url string) error {
	err := Poll(ctx, 90*time.Second, func() error {
		if p.exited() {
			return p.exitError()
		}
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	if p.exited() {
		if log, rerr := os.ReadFile(p.logPath); rerr == nil && bytes.Contains(log, []byte("address already in use")) {
			return fmt.Errorf("%s: %w", p.name, errPortBusy)
		}
		return p.exitError()
	}
	return fmt.Errorf("%s not ready: %w; end of %s:\n%s", p.name, err, p.logPath, tailFile(p.logPath, 20))
}

func (p *pki) adminHTTPClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.caPEM) {
		return nil, errors.New("admin client: bad CA certificate")
	}
	cert, err := tls.X509KeyPair(p.adminCert, p.adminKey)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		}},
	}, nil
}

func (c *Cluster) makeClients(p *pki) error {
	restConfig := func(cert, key []byte) *rest.Config {
		return &rest.Config{
			Host:            c.Host,
			TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: cert, KeyData: key},
			// Tests create objects in bursts; client-go's default 5 QPS would
			// make them measure the rate limiter.
			QPS: 500, Burst: 1000,
			UserAgent: "perimeter-testenv",
		}
	}
	c.AdminConfig = restConfig(p.adminCert, p.adminKey)
	c.DaemonConfig = restConfig(p.perimeterCert, p.perimeterKey)
	var err error
	if c.Admin, err = kubernetes.NewForConfig(c.AdminConfig); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	c.AdminKubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	c.DaemonKubeconfig = filepath.Join(c.Dir, "perimeter.kubeconfig")
	if err := writeKubeconfig(c.AdminKubeconfig, c.Host, adminUser, p.caPEM, p.adminCert, p.adminKey); err != nil {
		return err
	}
	return writeKubeconfig(c.DaemonKubeconfig, c.Host, perimeterUser, p.caPEM, p.perimeterCert, p.perimeterKey)
}

// writeKubeconfig embeds the certificates, so the file alone is enough (the
// lab hands it to a daemon running elsewhere on the machine); mode 0600.
func writeKubeconfig(path, host, user string, ca, cert, key []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

// applyManifest creates (or, on a reused lab directory, updates) every object
// of a multi-document YAML file.
func applyManifest(ctx context.Context, cfg *rest.Config, path string) error {
	objs, err := ReadObjects(path)
	if err != nil {
		return fmt.Errorf("apply manifest: %w", err)
	}
	if err := applyObjects(ctx, cfg, objs); err != nil {
		return fmt.Errorf("%w (from %s)", err, path)
	}
	return nil
}

// Stop stops the API server, then etcd, waits until both have exited, and
// removes the state directory if StartClusterCtx made it. Safe to call twice.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = c.stopProcesses()
		if c.removeDir && c.stopErr == nil {
			if err := os.RemoveAll(c.Dir); err != nil {
				c.stopErr = fmt.Errorf("remove cluster dir: %w", err)
			}
		}
	})
	return c.stopErr
}

func (c *Cluster) stopProcesses() error {
	// The API server's graceful shutdown takes a second; its state is thrown
	// away with a temporary directory, so it is killed at once there.
	grace := 10 * time.Second
	if c.removeDir {
		grace = 0
	}
	var errs []error
	for _, p := range []*process{c.apiserver, c.etcd} {
		if p != nil {
			errs = append(errs, p.stop(grace))
		}
	}
	return errors.Join(errs...)
}

// PIDs returns the process ids of kube-apiserver and etcd (0 if not started).
func (c *Cluster) PIDs() (apiserver, etcd int) {
	if c.apiserver != nil {
		apiserver = c.apiserver.pid()
	}
	if c.etcd != nil {
		etcd = c.etcd.pid()
	}
	return apiserver, etcd
}

// LogTail returns the last n lines of each server's log.
func (c *Cluster) LogTail(n int) string {
	var sb strings.Builder
	for _, p := range []*process{c.etcd, c.apiserver} {
		if p != nil {
			fmt.Fprintf(&sb, "--- %s (%s)\n%s", p.name, p.logPath, tailFile(p.logPath, n))
		}
	}
	return sb.String()
}

// Namespace creates a namespace for the test, named after it. It is left
// behind: without a controller-manager its deletion would never finish.
func (c *Cluster) Namespace(tb testing.TB) string {
	tb.Helper()
	ns, err := c.NamespaceCtx(context.Background(), tb.Name())
	if err != nil {
		tb.Fatal(err)
	}
	return ns
}

// NamespaceCtx creates a namespace with a unique name starting with prefix
// (made DNS-safe and short).
func (c *Cluster) NamespaceCtx(ctx context.Context, prefix string) (string, error) {
	ns, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: dnsPrefix(prefix, 40) + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace for %s: %w", prefix, err)
	}
	return ns.Name, nil
}

// dnsPrefix lowercases s and keeps [a-z0-9-], at most max characters, never
// starting or ending with '-'.
func dnsPrefix(s string, max int) string {
	var b []byte
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b = append(b, byte(r))
		case len(b) > 0 && b[len(b)-1] != '-':
			b = append(b, '-')
		}
		if len(b) >= max {
			break
		}
	}
	out := strings.Trim(string(b), "-")
	if out == "" {
		return "t"
	}
	return out
}
