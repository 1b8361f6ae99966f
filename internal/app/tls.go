package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/metrics"
	"github.com/perimeter-ingress/perimeter/internal/model"
)

// defaultCertificateCN is the subject of the certificate generated at start.
const defaultCertificateCN = "perimeter default certificate"

// selfSignedCertificate makes the certificate served to HTTPS clients whose
// SNI matches nothing when no Secret gives one. It lives only in this
// process (and in the 0600 file HAProxy reads): a restart makes a new one.
func selfSignedCertificate(now time.Time) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("default certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("default certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: defaultCertificateCN},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("default certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("default certificate: %w", err)
	}
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})...), nil
}

// certificateMetrics publishes the expiry of every served certificate:
// not those HAProxy refused (refused names their Secrets).
func certificateMetrics(m *metrics.Daemon, t model.TLS, refused []model.Problem) {
	m.Certificates.Reset()
	dropped := map[model.ObjectRef]bool{}
	for _, p := range refused {
		if p.Reason == model.ReasonInvalidSecret && p.Object.Kind == "Secret" {
			dropped[p.Object] = true
		}
	}
	set := func(c *model.Certificate) {
		if c == nil || (c.Secret.Name != "" && dropped[c.Secret]) {
			return
		}
		secret := ""
		if c.Secret.Name != "" {
			secret = c.Secret.Namespace + "/" + c.Secret.Name
		}
		m.Certificates.WithLabelValues(c.Name, secret).Set(float64(c.NotAfter.Unix()))
	}
	set(t.Default)
	for _, c := range t.Certificates {
		set(c)
	}
}
