package model

import (
	"bytes"
	"cmp"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TLS problem reasons.
const (
	ReasonSecretNotFound  = "SecretNotFound"
	ReasonInvalidSecret   = "InvalidSecret"
	ReasonTLSHostConflict = "TLSHostConflict"
	// ReasonTLSHostNotRouted: a spec.tls host the Ingress does not route,
	// or routes without owning it; its certificate is not served for it.
	ReasonTLSHostNotRouted = "TLSHostNotRouted"
)

// MapSSLRedirect is the map of hosts whose plain-HTTP requests are
// redirected to HTTPS: host -> "CODE" or "CODE:PORT".
const MapSSLRedirect = "ssl-redirect"

// DefaultCertificateName names the certificate served to clients whose SNI
// matches no other certificate.
const DefaultCertificateName = "default"

// TLS is what the https frontend serves and the files backends use.
type TLS struct {
	// Default answers clients whose SNI matches no certificate; nil when
	// Options.DefaultCertificate is empty and no Secret gives one.
	Default *Certificate
	// Certificates are the Ingress spec.tls Secrets, sorted by Name.
	Certificates []*Certificate
	// ClientCA verifies client certificates (ConfigMap client-ca); nil: no
	// client authentication.
	ClientCA *PEMFile
}

// TLSPolicy is the ConfigMap's TLS settings. Every value was validated.
type TLSPolicy struct {
	// ALPN is a comma-separated protocol list, e.g. "h2,http/1.1".
	ALPN string
	// MinVersion is an HAProxy ssl-min-ver value, e.g. "TLSv1.2".
	MinVersion string
	// Ciphers (TLS <= 1.2) and Ciphersuites (TLS 1.3) are OpenSSL lists.
	Ciphers, Ciphersuites string
	// ClientCertOptional lets clients without a certificate in when
	// ClientCA is set (verify optional instead of required).
	ClientCertOptional bool
	// StrictSNI refuses the handshake of a client whose SNI matches no
	// certificate, instead of serving the default certificate.
	StrictSNI bool
}

// BackendTLS says how HAProxy connects to a backend's servers.
type BackendTLS struct {
	// SSL connects with TLS; without CA the server is not verified.
	SSL bool
	// Proto is "" or "h2" (HTTP/2: ALPN h2 with SSL, cleartext otherwise).
	Proto string
	// CA verifies the servers' certificates; Cert is presented to them.
	CA   *PEMFile
	Cert *Certificate
	// CASecret and CertSecret are the server-ca and server-crt values as
	// NAMESPACE/NAME, resolved into CA and Cert.
	CASecret, CertSecret string
}

// Certificate is a validated certificate chain with its private key.
type Certificate struct {
	// Name is unique among certificates and safe as a file name:
	// "<namespace>_<secret>" or DefaultCertificateName.
	Name string
	// Secret is where it came from; zero for the generated default.
	Secret ObjectRef
	// PEM is the chain (leaf first) then the key, re-encoded: no blank
	// line, no comment, nothing but PEM blocks.
	PEM []byte
	// Hosts are the SNI names it serves, sorted. Never empty for an
	// Ingress certificate: an empty SNI filter would let the certificate
	// answer for whatever names it carries, including other tenants' hosts.
	Hosts []string
	// Ingresses are the Ingresses whose spec.tls gave it its hosts, for
	// Events when HAProxy refuses it.
	Ingresses []ObjectRef
	// Subject and NotAfter describe the leaf, for logs and metrics.
	Subject  string
	NotAfter time.Time
}

// PEMFile is a validated bundle of CA certificates.
type PEMFile struct {
	// Name is "<namespace>_<secret>_<first 12 hex digits of sha256>": a
	// new content is a new file.
	Name   string
	Secret ObjectRef
	PEM    []byte
}

// Default TLS policy, applied by the renderer where TLSPolicy leaves a
// field empty: TLS 1.2 and up with Mozilla's "intermediate" ciphers.
const (
	DefaultALPN         = "h2,http/1.1"
	DefaultMinVersion   = "TLSv1.2"
	DefaultCiphers      = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384"
	DefaultCiphersuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
)

// Handles of the settings the TLS step reads itself.
var (
	sslRedirect     = newHandle(boolParser())
	sslRedirectCode = newHandle(enumParser("301", "302", "303", "307", "308"))
	sslRedirectPort = newHandle(intRange(1, 65535))
	sslCertificate  = newHandle(secretRefParser())
	clientCA        = newHandle(secretRefParser())
)

// tlsSettings are the TLS entries of the settings table.
func tlsSettings() []Setting {
	const ingScopes = ScopeConfigMap | ScopeIngress
	return []Setting{
		sslRedirect.register(Setting{
			Name: "ssl-redirect", Example: "true", Runtime: true, Scopes: ingScopes,
			Doc: "Redirect plain-HTTP requests to HTTPS. Default: on for the hosts of Ingresses with spec.tls, off otherwise.",
		}, TargetTLS),
		sslRedirectCode.register(Setting{
			Name: "ssl-redirect-code", Example: "301", Runtime: true, Scopes: ingScopes, Default: "302",
			Doc: "Status code of the HTTPS redirect.",
		}, TargetTLS),
		sslRedirectPort.register(Setting{
			Name: "ssl-redirect-port", Example: "8443", Runtime: true, Scopes: ingScopes,
			Doc: "Port of the HTTPS redirect's target (default: none, i.e. 443).",
		}, TargetTLS),
		sslCertificate.register(Setting{
			Name: "ssl-certificate", Example: "ingress/default-cert", Runtime: true, Scopes: ScopeConfigMap,
			Doc: "Secret (kubernetes.io/tls) served to clients whose SNI matches no Ingress; overrides --default-ssl-certificate.",
		}, TargetTLS),
		clientCA.register(Setting{
			Name: "client-ca", Example: "ingress/client-ca", Scopes: ScopeConfigMap,
			Doc: "Secret whose ca.crt (else tls.crt) verifies client certificates at the https frontend.",
		}, TargetTLS),
		globalSetting(Setting{
			Name: "client-crt-optional", Example: "true", Scopes: ScopeConfigMap,
			Doc: "With client-ca: let clients without a certificate in (verify optional) instead of refusing them.",
		}, boolParser(), func(g *Global, v bool) { g.TLS.ClientCertOptional = v }),
		globalSetting(Setting{
			Name: "client-strict-sni", Default: "false", Example: "true", Scopes: ScopeConfigMap,
			Doc: "Refuse the TLS handshake of a client whose SNI matches no Ingress certificate (HAProxy's strict-sni) instead of serving the default certificate. Passthrough hosts are routed before and are not affected.",
		}, boolParser(), func(g *Global, v bool) { g.TLS.StrictSNI = v }),
		globalSetting(Setting{
			Name: "tls-alpn", Example: "h2,http/1.1", Scopes: ScopeConfigMap,
			Doc: "ALPN protocols offered by the https frontend (default h2,http/1.1).",
		}, alpnParser(), func(g *Global, v string) { g.TLS.ALPN = v }),
		globalSetting(Setting{
			Name: "ssl-min-version", Example: "TLSv1.3", Scopes: ScopeConfigMap,
			Doc: "Oldest TLS version the https frontend accepts (ssl-default-bind-options ssl-min-ver; default TLSv1.2).",
		}, enumParser("TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3"), func(g *Global, v string) { g.TLS.MinVersion = v }),
		globalSetting(Setting{
			Name: "ssl-ciphers", Example: "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256", Scopes: ScopeConfigMap,
			Doc: "OpenSSL cipher list for TLS 1.2 and older (ssl-default-bind-ciphers; default: Mozilla's intermediate list of ECDHE/DHE AES-GCM and ChaCha20 ciphers).",
		}, cipherParser(), func(g *Global, v string) { g.TLS.Ciphers = v }),
		globalSetting(Setting{
			Name: "ssl-ciphersuites", Example: "TLS_AES_128_GCM_SHA256", Scopes: ScopeConfigMap,
			Doc: "OpenSSL TLS 1.3 cipher suites (ssl-default-bind-ciphersuites; default TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256).",
		}, cipherParser(), func(g *Global, v string) { g.TLS.Ciphersuites = v }),
		backendSetting(Setting{
			Name: "server-ssl", Example: "true", Scopes: backendScopes,
			Doc: "Connect to the servers with TLS, without verifying their certificate (see server-ca).",
		}, boolParser(), func(b *backendDraft, v bool) { b.TLS.SSL = v }),
		backendSetting(Setting{
			Name: "server-ca", Example: "pod-ca", Scopes: backendScopes,
			Doc: "Secret (NAME or NAMESPACE/NAME; ca.crt, else tls.crt) whose CAs verify the servers' certificates; implies server-ssl.",
		}, secretRefParser(), func(b *backendDraft, v string) { b.TLS.CASecret = v }),
		backendSetting(Setting{
			Name: "server-crt", Example: "pod-client-cert", Scopes: backendScopes,
			Doc: "Secret (kubernetes.io/tls, NAME or NAMESPACE/NAME) presented to the servers as client certificate; implies server-ssl.",
		}, secretRefParser(), func(b *backendDraft, v string) { b.TLS.CertSecret = v }),
		backendSetting(Setting{
			Name: "server-proto", Example: "h2", Scopes: backendScopes,
			Doc: "Protocol spoken to the servers: h2 (ALPN h2 over TLS, cleartext HTTP/2 otherwise).",
		}, enumParser("h2"), func(b *backendDraft, v string) { b.TLS.Proto = v }),
	}
}

var (
	alpnRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9./-]{0,31}(,[a-z0-9][a-z0-9./-]{0,31}){0,7}$`)
	cipherRE = regexp.MustCompile(`^[A-Za-z0-9_:+-]+$`)
)

func alpnParser() parser[string] {
	return parser[string]{
		desc: "comma-separated protocols, e.g. h2,http/1.1",
		parse: func(s string) (string, error) {
			if !alpnRE.MatchString(s) {
				return "", errors.New("want comma-separated protocol names of [a-z0-9./-]")
			}
			return s, nil
		},
	}
}

func cipherParser() parser[string] {
	return parser[string]{
		desc: "OpenSSL list of [A-Za-z0-9_:+-]",
		parse: func(s string) (string, error) {
			if len(s) > 2048 || !cipherRE.MatchString(s) {
				return "", errors.New("only [A-Za-z0-9_:+-] are allowed")
			}
			return s, nil
		},
	}
}

// secret is the snapshot's Secret k, or nil; the index is built on first
// use, so a Build that reads no Secret pays nothing.
func (b *builder) secret(k nsName) *corev1.Secret {
	if b.secrets == nil {
		b.secrets = make(map[nsName]*corev1.Secret, len(b.s.Secrets))
		for _, s := range b.s.Secrets {
			if s != nil {
				b.secrets[nsName{s.Namespace, s.Name}] = s
			}
		}
	}
	return b.secrets[k]
}

// tlsBuilder resolves Secrets once per Build.
type tlsBuilder struct {
	b       *builder
	pending map[string]bool
	certs   map[string]certResult
	refs    []string
}

type certResult struct {
	cert *Certificate
	err  error
	// missing is true when the Secret does not exist (or is loading).
	missing bool
}

// buildTLS fills Desired.TLS and the backends' TLS from the Secrets the
// served objects reference. A Secret that is missing or invalid becomes a
// Problem on the object that names it; its hosts get the default
// certificate, everything else is unaffected.
func (b *builder) buildTLS(ings []*networkingv1.Ingress) {
	t := &tlsBuilder{b: b, pending: map[string]bool{}, certs: map[string]certResult{}}
	for _, p := range b.s.PendingSecrets {
		t.pending[p] = true
	}
	// Refused Secrets are reported as such (tenant.go), not as missing.
	for p := range b.s.RefusedSecrets {
		t.pending[p] = true
	}
	if on, ok := sslRedirect.get(b.cmValues); ok {
		b.d.Global.SSLRedirect = on
	}
	t.defaultCertificate()
	t.ingressCertificates(ings)
	t.gatewayCertificates()
	t.redirects(ings)
	t.clientCA()
	t.backends()
	b.d.SecretRefs = append(b.d.SecretRefs, t.refs...)
	slices.Sort(b.d.SecretRefs)
	b.d.SecretRefs = slices.Compact(b.d.SecretRefs)
}

func (t *tlsBuilder) cmRef() ObjectRef {
	cm := t.b.s.ConfigMap
	if cm == nil {
		return ObjectRef{Kind: "ConfigMap"}
	}
	return ObjectRef{Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name}
}

// secretKey splits a reference, NAME meaning a Secret of ns.
func secretKey(ref, ns string) nsName {
	if n, name, ok := strings.Cut(ref, "/"); ok {
		return nsName{n, name}
	}
	return nsName{ns, ref}
}

// loadCert reads a kubernetes.io/tls Secret once per Build.
func (t *tlsBuilder) loadCert(k nsName) certResult {
	key := k.ns + "/" + k.name
	t.refs = append(t.refs, key)
	if r, ok := t.certs[key]; ok {
		return r
	}
	var r certResult
	sec := t.b.secret(k)
	switch {
	case sec == nil:
		r = certResult{missing: true, err: fmt.Errorf("secret %s not found", key)}
	case sec.Type != corev1.SecretTypeTLS && sec.Type != corev1.SecretTypeOpaque && sec.Type != "":
		r.err = fmt.Errorf("secret %s is of type %s, want %s", key, sec.Type, corev1.SecretTypeTLS)
	default:
		c, err := parseCertificate(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			r.err = fmt.Errorf("secret %s: %w", key, err)
			break
		}
		c.Name = k.ns + "_" + k.name
		c.Secret = ObjectRef{Kind: "Secret", Namespace: k.ns, Name: k.name}
		r.cert = c
	}
	t.certs[key] = r
	return r
}

// report records a Secret problem on obj, unless the Secret is still being
// loaded.
func (t *tlsBuilder) report(obj ObjectRef, k nsName, r certResult, fallback string) {
	if r.missing && t.pending[k.ns+"/"+k.name] {
		return
	}
	reason := ReasonInvalidSecret
	if r.missing {
		reason = ReasonSecretNotFound
	}
	t.b.problem(obj, reason, "%v; %s", r.err, fallback)
}

// parseCertificate checks that certPEM and keyPEM hold a certificate chain
// and its private key that HAProxy's OpenSSL 3 will load, and re-encodes
// them as one bundle. Go alone accepts more than OpenSSL does (a chain
// block that does not parse, RSA-1024, SHA-1 signatures), and a bundle
// HAProxy refuses fails every later reload, so every block is checked
// against OpenSSL's security level 2 here.
func parseCertificate(certPEM, keyPEM []byte) (*Certificate, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, fmt.Errorf("%s and %s are both required", corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	var chain []*x509.Certificate
	n := 0
	for rest := certPEM; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue // never written: only certificates and the key are
		}
		n++
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s certificate %d: %w", corev1.TLSCertKey, n, err)
		}
		if err := checkChainCert(c); err != nil {
			return nil, fmt.Errorf("%s certificate %d (%s): %w", corev1.TLSCertKey, n, c.Subject.String(), err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate", corev1.TLSCertKey)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("not a matching certificate and key: %w", err)
	}
	leaf := chain[0]
	var out bytes.Buffer
	for _, c := range chain {
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	// X509KeyPair found the key; take the same block again, as written.
	rest := keyPEM
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, errors.New("private key: no PEM block")
		}
		if blk.Type == "PRIVATE KEY" || strings.HasSuffix(blk.Type, " PRIVATE KEY") {
			_ = pem.Encode(&out, &pem.Block{Type: blk.Type, Bytes: blk.Bytes})
			break
		}
	}
	return &Certificate{PEM: out.Bytes(), Subject: leaf.Subject.String(), NotAfter: leaf.NotAfter.UTC()}, nil
}

// MinRSABits is the smallest RSA key OpenSSL 3 loads at security level 2
// (Debian's default, and HAProxy's).
const MinRSABits = 2048

// checkChainCert refuses what OpenSSL refuses when HAProxy loads the chain
// into an SSL context: small keys, curves clients do not offer, and
// signatures with SHA-1 or MD5 (except on a self-signed root, whose
// signature nobody checks).
func checkChainCert(c *x509.Certificate) error {
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits {
			return fmt.Errorf("RSA key of %d bits; at least %d are needed", bits, MinRSABits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return fmt.Errorf("ECDSA curve %s; P-256, P-384 or P-521 are needed", k.Curve.Params().Name)
		}
	default:
		return fmt.Errorf("%s keys are not supported; RSA or ECDSA are needed", c.PublicKeyAlgorithm)
	}
	if selfSigned(c) {
		return nil
	}
	switch c.SignatureAlgorithm {
	case x509.MD2WithRSA, x509.MD5WithRSA, x509.SHA1WithRSA, x509.DSAWithSHA1, x509.ECDSAWithSHA1:
		return fmt.Errorf("signed with %s, which OpenSSL refuses; SHA-256 or better is needed", c.SignatureAlgorithm)
	case x509.UnknownSignatureAlgorithm:
		return errors.New("signed with an unknown algorithm")
	}
	return nil
}

// selfSigned follows OpenSSL's EXFLAG_SS: same subject and issuer, an
// authority key ID (if any) equal to its own, a signature of its own key's
// kind.
func selfSigned(c *x509.Certificate) bool {
	if !bytes.Equal(c.RawSubject, c.RawIssuer) {
		return false
	}
	if len(c.AuthorityKeyId) > 0 && !bytes.Equal(c.AuthorityKeyId, c.SubjectKeyId) {
		return false
	}
	switch c.SignatureAlgorithm {
	case x509.MD2WithRSA, x509.MD5WithRSA, x509.SHA1WithRSA, x509.SHA256WithRSA, x509.SHA384WithRSA, x509.SHA512WithRSA,
		x509.SHA256WithRSAPSS, x509.SHA384WithRSAPSS, x509.SHA512WithRSAPSS:
		return c.PublicKeyAlgorithm == x509.RSA
	case x509.ECDSAWithSHA1, x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512:
		return c.PublicKeyAlgorithm == x509.ECDSA
	}
	return false
}

// parseCABundle checks that data holds at least one CA certificate and
// re-encodes it.
func parseCABundle(data []byte) ([]byte, error) {
	var out bytes.Buffer
	n := 0
	for rest := data; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("CA certificate %d: %w", n+1, err)
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes})
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out.Bytes(), nil
}

// loadCA reads a CA bundle Secret: key ca.crt, else tls.crt.
func (t *tlsBuilder) loadCA(k nsName) (*PEMFile, certResult) {
	key := k.ns + "/" + k.name
	t.refs = append(t.refs, key)
	sec := t.b.secret(k)
	if sec == nil {
		return nil, certResult{missing: true, err: fmt.Errorf("secret %s not found", key)}
	}
	data := sec.Data["ca.crt"]
	if len(data) == 0 {
		data = sec.Data[corev1.TLSCertKey]
	}
	bundle, err := parseCABundle(data)
	if err != nil {
		return nil, certResult{err: fmt.Errorf("secret %s: %w", key, err)}
	}
	sum := sha256.Sum256(bundle)
	return &PEMFile{
		Name:   k.ns + "_" + k.name + "_" + hex.EncodeToString(sum[:6]),
		Secret: ObjectRef{Kind: "Secret", Namespace: k.ns, Name: k.name},
		PEM:    bundle,
	}, certResult{}
}

func (t *tlsBuilder) defaultCertificate() {
	b := t.b
	ref, from := "", ""
	if raw, ok := sslCertificate.raw(b.cmValues); ok {
		ref, from = raw, "ConfigMap ssl-certificate"
	} else if b.o.DefaultSSLCertificate != "" {
		ref, from = b.o.DefaultSSLCertificate, "--default-ssl-certificate"
	}
	if ref != "" {
		k := secretKey(ref, "")
		obj := t.cmRef()
		if from != "ConfigMap ssl-certificate" {
			obj = ObjectRef{Kind: "Secret", Namespace: k.ns, Name: k.name}
		}
		switch {
		case k.ns == "":
			b.problem(obj, ReasonInvalidOption, "%s %q: want NAMESPACE/NAME; the generated default certificate is served", from, ref)
		default:
			r := t.loadCert(k)
			if r.err == nil {
				c := *r.cert
				c.Name = DefaultCertificateName
				b.d.TLS.Default = &c
				return
			}
			t.report(obj, k, r, "the generated default certificate is served")
		}
	}
	if len(b.o.DefaultCertificate) == 0 {
		return
	}
	c, err := parseCertificate(b.o.DefaultCertificate, b.o.DefaultCertificate)
	if err != nil {
		b.problem(ObjectRef{Kind: "Flag"}, ReasonInvalidOption, "generated default certificate: %v; HTTPS is not served", err)
		return
	}
	c.Name = DefaultCertificateName
	b.d.TLS.Default = c
}

// hostOwners finds, for every host with served routes, the Ingress that
// owns it: the oldest Ingress with a route on it that the model accepted
// (rules the conflict rules refused do not count). ings is oldest first.
// It also returns the hosts each Ingress routes.
func (t *tlsBuilder) hostOwners(ings []*networkingv1.Ingress) (owner map[string]*networkingv1.Ingress, routed map[ObjectRef][]string) {
	byRef := make(map[ObjectRef]*networkingv1.Ingress, len(ings))
	for _, ing := range ings {
		byRef[ingressRef(ing)] = ing
	}
	owner = map[string]*networkingv1.Ingress{}
	routed = map[ObjectRef][]string{}
	for _, r := range t.b.routes {
		ing := byRef[r.Ingress]
		if r.Host == "" || ing == nil {
			continue
		}
		if !slices.Contains(routed[r.Ingress], r.Host) {
			routed[r.Ingress] = append(routed[r.Ingress], r.Host)
		}
		if o := owner[r.Host]; o == nil || olderIngress(ing, o) < 0 {
			owner[r.Host] = ing
		}
	}
	for _, hosts := range routed {
		slices.Sort(hosts)
	}
	return owner, routed
}

// ingressCertificates gives every spec.tls host its certificate. Only the
// host's owner decides: a spec.tls host counts when its Ingress routes it
// and is in the namespace of the host's owner; an entry without hosts
// serves the hosts its Ingress routes (never an empty SNI filter, which
// would let the certificate's own names reach other tenants' hosts). The
// oldest Ingress wins a host two Secrets claim.
func (t *tlsBuilder) ingressCertificates(ings []*networkingv1.Ingress) {
	b := t.b
	hostOwner, routed := t.hostOwners(ings)
	byName := map[string]*Certificate{}
	owner := map[string]string{} // host -> certificate name
	ownerIng := map[string]*networkingv1.Ingress{}
	for _, ing := range ings {
		ref := ingressRef(ing)
		// Hosts that some entry names: an entry without hosts gets the
		// other routed hosts.
		named := map[string]bool{}
		for _, entry := range ing.Spec.TLS {
			for _, h := range entry.Hosts {
				named[strings.ToLower(h)] = true
			}
		}
		for _, entry := range ing.Spec.TLS {
			if entry.SecretName == "" {
				continue
			}
			k := nsName{ing.Namespace, entry.SecretName}
			var hosts []string
			for _, h := range entry.Hosts {
				h = strings.ToLower(h)
				if err := checkHost(h); err != nil {
					b.problem(ref, ReasonInvalidHost, "spec.tls host %q: %v; the host is ignored", h, err)
					continue
				}
				hosts = append(hosts, h)
			}
			if len(entry.Hosts) == 0 {
				for _, h := range routed[ref] {
					if !named[h] {
						hosts = append(hosts, h)
					}
				}
				if len(hosts) == 0 {
					b.problem(ref, ReasonTLSHostNotRouted, "spec.tls entry for Secret %s has no hosts and the Ingress routes no other host; the certificate is not served",
						entry.SecretName)
					continue
				}
			}
			var own []string
			for _, h := range hosts {
				switch o := hostOwner[h]; {
				case !slices.Contains(routed[ref], h):
					b.problem(ref, ReasonTLSHostNotRouted, "spec.tls host %q: this Ingress has no rule for it; Secret %s is not served for it",
						h, entry.SecretName)
				case o.Namespace != ing.Namespace:
					b.problem(ref, ReasonTLSHostNotRouted, "spec.tls host %q: the host belongs to another namespace; Secret %s is not served for it",
						h, entry.SecretName)
				default:
					own = append(own, h)
				}
			}
			if len(own) == 0 {
				continue
			}
			r := t.loadCert(k)
			if r.err != nil {
				t.report(ref, k, r, fmt.Sprintf("hosts %s get the default certificate", strings.Join(own, ",")))
				continue
			}
			c := byName[r.cert.Name]
			if c == nil {
				cp := *r.cert
				c = &cp
				byName[c.Name] = c
			}
			for _, h := range own {
				if o, taken := owner[h]; taken {
					if o != c.Name {
						older := ownerIng[h]
						b.problem(ref, ReasonTLSHostConflict, "spec.tls host %q: older Ingress %s serves it with another Secret; Secret %s is not used for it",
							h, older.Name, entry.SecretName)
					}
					continue
				}
				owner[h], ownerIng[h] = c.Name, ing
				c.Hosts = append(c.Hosts, h)
				if !slices.Contains(c.Ingresses, ref) {
					c.Ingresses = append(c.Ingresses, ref)
				}
			}
		}
	}
	for _, c := range byName {
		if len(c.Hosts) == 0 {
			continue
		}
		slices.Sort(c.Hosts)
		b.d.TLS.Certificates = append(b.d.TLS.Certificates, c)
	}
	slices.SortFunc(b.d.TLS.Certificates, func(x, y *Certificate) int { return cmp.Compare(x.Name, y.Name) })
}

// redirects decides per host whether plain HTTP is redirected: the
// Ingress annotation, else the ConfigMap, else "on when the Ingress has
// spec.tls". The host's owner (see hostOwners) decides: an Ingress whose
// rules for the host were refused, or that is merely older, does not.
func (t *tlsBuilder) redirects(ings []*networkingv1.Ingress) {
	hostOwner, _ := t.hostOwners(ings)
	out := map[string]string{}
	for h, ing := range hostOwner {
		if checkHost(h) != nil {
			continue
		}
		if target, on := t.b.redirectTarget(ing); on {
			out[h] = target
		}
	}
	t.b.d.Maps[MapSSLRedirect] = out
}

// redirectTarget is the ssl-redirect entry of the hosts ing owns; on is
// false when they are not redirected.
func (b *builder) redirectTarget(ing *networkingv1.Ingress) (target string, on bool) {
	// value is the Ingress's value, else the ConfigMap's, else the default.
	value := func(h interface{ raw(values) (string, bool) }, def string) (string, bool) {
		if v, ok := h.raw(b.ingValues[ing]); ok {
			return v, true
		}
		if v, ok := h.raw(b.cmValues); ok {
			return v, true
		}
		return def, def != ""
	}
	on = len(ing.Spec.TLS) > 0
	if raw, ok := value(sslRedirect, sslRedirect.setting().Default); ok {
		on, _ = parseBool(raw)
	}
	if !on {
		return "", false
	}
	target, _ = value(sslRedirectCode, sslRedirectCode.setting().Default)
	if port, ok := value(sslRedirectPort, sslRedirectPort.setting().Default); ok {
		target += ":" + port
	}
	return target, true
}

func (t *tlsBuilder) clientCA() {
	raw, ok := clientCA.raw(t.b.cmValues)
	if !ok {
		return
	}
	k := secretKey(raw, "")
	if k.ns == "" && t.b.s.ConfigMap != nil {
		k.ns = t.b.s.ConfigMap.Namespace
	}
	ca, r := t.loadCA(k)
	if r.err != nil {
		// Failing open would let every client in: refuse them all instead
		// by keeping the last good CA in HAProxy (the driver keeps running
		// what it has when the model gives nothing new).
		t.report(t.cmRef(), k, r, "client certificates cannot be verified; the https frontend refuses clients until it is fixed")
		t.b.d.TLS.ClientCA = &PEMFile{Name: "invalid", Secret: ObjectRef{Kind: "Secret", Namespace: k.ns, Name: k.name}}
		return
	}
	t.b.d.TLS.ClientCA = ca
}

// backends resolves server-ca and server-crt. A backend whose Secret is
// missing or invalid keeps TLS but drops what the Secret would give: with
// server-ca it then refuses to connect rather than skip verification.
func (t *tlsBuilder) backends() {
	b := t.b
	for _, be := range b.d.Backends {
		st := b.backends[be.Name]
		bt := &be.TLS
		if bt.CASecret != "" {
			bt.SSL = true
			k := secretKey(bt.CASecret, be.Namespace)
			ca, r := t.loadCA(k)
			if r.err != nil {
				t.reportUsers(be, st, k, r, "backend "+be.Name+" cannot verify its servers and gets no servers until it is fixed")
				// Fail closed: no server rather than an unverified one.
				be.Endpoints = nil
				be.endpointsFrom.failClosed = true
			}
			bt.CA = ca
		}
		if bt.CertSecret != "" {
			bt.SSL = true
			k := secretKey(bt.CertSecret, be.Namespace)
			r := t.loadCert(k)
			if r.err != nil {
				t.reportUsers(be, st, k, r, "backend "+be.Name+" connects without a client certificate")
				continue
			}
			c := *r.cert
			sum := sha256.Sum256(c.PEM)
			c.Name += "_" + hex.EncodeToString(sum[:6])
			bt.Cert = &c
		}
	}
}

// reportUsers reports a backend's Secret problem to the Ingresses routing
// to it, or to its Service when no Ingress does (a TCP service).
func (t *tlsBuilder) reportUsers(be *Backend, st *backendState, k nsName, r certResult, fallback string) {
	if r.missing && t.pending[k.ns+"/"+k.name] {
		return
	}
	reason := ReasonInvalidSecret
	if r.missing {
		reason = ReasonSecretNotFound
	}
	if st == nil {
		t.b.problem(serviceRef(be.Namespace, be.Service), reason, "%v; %s", r.err, fallback)
		return
	}
	t.b.userProblem(st, reason, "%v; %s", r.err, fallback)
}

// dumpTLS writes the TLS part of Desired for Dump.
func dumpTLS(w *strings.Builder, d *Desired) {
	p := d.Global.TLS
	fmt.Fprintf(w, "\ntls alpn=%s min=%s client-optional=%t", p.ALPN, p.MinVersion, p.ClientCertOptional)
	if p.StrictSNI {
		w.WriteString(" strict-sni")
	}
	w.WriteString("\n")
	if p.Ciphers != "" || p.Ciphersuites != "" {
		fmt.Fprintf(w, "  ciphers %s\n  ciphersuites %s\n", p.Ciphers, p.Ciphersuites)
	}
	cert := func(c *Certificate) {
		src := "generated"
		if c.Secret.Name != "" {
			src = c.Secret.String()
		}
		fmt.Fprintf(w, "  cert %s from %s subject=%q not-after=%s hosts=%s\n", c.Name, src, c.Subject,
			c.NotAfter.Format(time.RFC3339), strings.Join(c.Hosts, ","))
	}
	if d.TLS.Default != nil {
		cert(d.TLS.Default)
	}
	for _, c := range d.TLS.Certificates {
		cert(c)
	}
	if ca := d.TLS.ClientCA; ca != nil {
		fmt.Fprintf(w, "  client-ca %s\n", ca.Name)
	}
	for _, be := range d.Backends {
		bt := be.TLS
		if !bt.SSL && bt.Proto == "" {
			continue
		}
		fmt.Fprintf(w, "  backend %s ssl=%t proto=%s", be.Name, bt.SSL, bt.Proto)
		if bt.CA != nil {
			fmt.Fprintf(w, " ca=%s", bt.CA.Name)
		}
		if bt.Cert != nil {
			fmt.Fprintf(w, " crt=%s", bt.Cert.Name)
		}
		w.WriteString("\n")
	}
}

// RedirectTarget splits a MapSSLRedirect value into code and port (0: none).
func RedirectTarget(v string) (code, port int) {
	c, p, _ := strings.Cut(v, ":")
	code, _ = strconv.Atoi(c)
	port, _ = strconv.Atoi(p)
	return code, port
}
