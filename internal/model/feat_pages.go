package model

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
)

// ErrorPage is one --configmap-errorfiles page: a whole HTTP response
// (head with CRLF line ends, blank line, body) that HAProxy returns instead
// of its own error for Code.
type ErrorPage struct {
	Code    int
	Content string
}

// TCPService is one --configmap-tcp-services entry: a mode tcp frontend on
// Port forwarding to Backend.
type TCPService struct {
	Port    int
	Backend string
	// SSL terminates TLS on Port with the default certificate.
	SSL bool
	// Shares, when there are several, split the connections by weight
	// (a TCPRoute's weighted backendRefs): a share's Backend gets Weight
	// of every sum-of-weights connections, and a share with no Backend
	// (a backendRef that does not resolve) has its connections refused.
	// Backend is then the last share that has one.
	Shares []TCPShare
}

// TCPShare is one weighted backend of a TCPService.
type TCPShare struct {
	Backend string
	Weight  int
}

// tcpOptions splits what follows NS/SERVICE: in a TCP service entry: PORT,
// PORT:ssl (the HAProxy Kubernetes Ingress Controller's form) or PORT::ssl
// (the same with an empty PROXY field, as ingress-nginx lays it out). A
// PROXY protocol field or another option is refused rather than ignored.
func tcpOptions(opts string) (port string, ssl bool, err error) {
	parts := strings.Split(opts, ":")
	port = parts[0]
	switch {
	case len(parts) == 1:
		return port, false, nil
	case len(parts) == 2 && parts[1] == "ssl":
		return port, true, nil
	case len(parts) > 3:
		return port, false, fmt.Errorf("%d fields after the port, want at most 2", len(parts)-1)
	case parts[1] != "":
		return port, false, fmt.Errorf("option %q is not supported for TCP services (want ssl)", parts[1])
	case len(parts) == 3 && parts[2] != "ssl" && parts[2] != "":
		return port, false, fmt.Errorf("option %q is not supported (want ssl)", parts[2])
	}
	return port, len(parts) == 3 && parts[2] == "ssl", nil
}

// ErrorFileCodes are the status codes HAProxy 2.6 generates and accepts in
// an errorfile directive.
var ErrorFileCodes = []int{200, 400, 401, 403, 404, 405, 407, 408, 410, 413, 425, 429, 500, 501, 502, 503, 504}

// maxErrorPage keeps a page well inside HAProxy's default buffer (16 KiB).
const maxErrorPage = 12 << 10

func (b *builder) errorPages() {
	cm := b.s.ErrorFiles
	if cm == nil {
		return
	}
	ref := ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
	for key, value := range cm.Data {
		code, err := strconv.Atoi(key)
		if err != nil || !allDigits(key) || !slices.Contains(ErrorFileCodes, code) {
			b.problem(ref, ReasonInvalidErrorFile, "key %q is not a status code HAProxy generates (%s); ignored", key, codesText())
			continue
		}
		content, err := errorPage(code, value)
		if err != nil {
			b.problem(ref, ReasonInvalidErrorFile, "page %d: %v; HAProxy's own page is used", code, err)
			continue
		}
		b.d.ErrorPages = append(b.d.ErrorPages, ErrorPage{Code: code, Content: content})
	}
	slices.SortFunc(b.d.ErrorPages, func(x, y ErrorPage) int { return x.Code - y.Code })
}

func codesText() string {
	var s []string
	for _, c := range ErrorFileCodes {
		s = append(s, strconv.Itoa(c))
	}
	return strings.Join(s, ", ")
}

// errorPage turns a ConfigMap value into a whole response. A value that
// starts with "HTTP/" is a response already (the HAProxy Kubernetes Ingress
// Controller's format): its head gets CRLF line ends and a Content-Length
// when it lacks one. Any other value is the body of an HTML page.
func errorPage(code int, value string) (string, error) {
	if len(value) > maxErrorPage {
		return "", fmt.Errorf("longer than %d bytes", maxErrorPage)
	}
	if !strings.HasPrefix(value, "HTTP/") {
		head := fmt.Sprintf("HTTP/1.1 %d %s\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n",
			code, http.StatusText(code), len(value))
		return head + value, nil
	}
	value = strings.ReplaceAll(value, "\r\n", "\n")
	head, body, _ := strings.Cut(value, "\n\n")
	lines := strings.Split(head, "\n")
	status := strings.Fields(lines[0])
	if len(status) < 2 || (status[0] != "HTTP/1.0" && status[0] != "HTTP/1.1") || len(status[1]) != 3 || !allDigits(status[1]) {
		return "", fmt.Errorf("status line %q is not HTTP/1.x <code> <reason>", lines[0])
	}
	hasLength := false
	for _, l := range lines[1:] {
		name, _, ok := strings.Cut(l, ":")
		if !ok || validHeaderName(name) != nil {
			return "", fmt.Errorf("header line %q is not Name: value", l)
		}
		if err := checkText(l, maxValueLen); err != nil {
			return "", fmt.Errorf("header line %q: %v", l, err)
		}
		if strings.EqualFold(name, "Content-Length") {
			hasLength = true
		}
	}
	if !hasLength {
		lines = append(lines, "Content-Length: "+strconv.Itoa(len(body)))
	}
	return strings.Join(lines, "\r\n") + "\r\n\r\n" + body, nil
}

// tcpServices reads --configmap-tcp-services: "PORT": "NS/SERVICE:PORT",
// or "NS/SERVICE:PORT:ssl" ("::ssl" too) to terminate TLS with the default certificate.
// Each entry gets its own mode tcp backend, named tcp<port>_<ns>_<svc>_<port>
// (four parts: no HTTP backend has that shape).
func (b *builder) tcpServices() {
	cm := b.s.TCPServices
	if cm == nil {
		return
	}
	ref := ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
	added := false
	for key, value := range cm.Data {
		port, err := strconv.Atoi(key)
		if err != nil || !allDigits(key) || port < 1 || port > 65535 {
			b.problem(ref, ReasonInvalidTCP, "key %q is not a port 1..65535; ignored", key)
			continue
		}
		value = strings.TrimSpace(value)
		target, opts, _ := strings.Cut(value, ":")
		ns, svc, ok := strings.Cut(target, "/")
		svcPort, ssl, optErr := tcpOptions(opts)
		if !ok || checkDNSLabel(ns) != nil || checkDNSLabel(svc) != nil || svcPort == "" {
			b.problem(ref, ReasonInvalidTCP, "port %d: %q is not NAMESPACE/SERVICE:PORT[:ssl]; ignored", port, value)
			continue
		}
		if optErr != nil {
			// Refuse rather than serve without what the entry asks for.
			b.problem(ref, ReasonInvalidTCP, "port %d: %v; ignored", port, optErr)
			continue
		}
		var bp networkingv1.ServiceBackendPort
		if n, err := strconv.Atoi(svcPort); err == nil && allDigits(svcPort) && n >= 1 && n <= 65535 {
			bp.Number = int32(n)
		} else if checkDNSLabel(svcPort) == nil {
			bp.Name = svcPort
		} else {
			b.problem(ref, ReasonInvalidTCP, "port %d: service port %q is not a number or a port name; ignored", port, svcPort)
			continue
		}
		name := fmt.Sprintf("tcp%d_%s_%s_%s", port, ns, svc, svcPort)
		if _, ok := b.services[nsName{ns, svc}]; !ok {
			b.problem(ref, ReasonServiceNotFound, "port %d: Service %s/%s not found; the port has no servers", port, ns, svc)
		}
		be := b.finishBackend(&backendState{name: name, namespace: ns, service: svc, port: bp})
		be.TCP = true
		be.HTTP = HTTPRules{}
		b.d.Backends = append(b.d.Backends, be)
		b.d.TCPServices = append(b.d.TCPServices, TCPService{Port: port, Backend: name, SSL: ssl})
		added = true
	}
	if added {
		slices.SortFunc(b.d.Backends, func(x, y *Backend) int { return strings.Compare(x.Name, y.Name) })
		slices.SortFunc(b.d.TCPServices, func(x, y TCPService) int { return x.Port - y.Port })
	}
}
