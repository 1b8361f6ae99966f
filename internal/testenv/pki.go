package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's throw-away certificate authority and the identities
// signed by it, written as PEM files (keys 0600) for the API server and kept
// in memory for the clients.
type pki struct {
	dir string

	caPEM []byte

	// client identities
	adminCert, adminKey         []byte // CN=admin, O=system:masters
	perimeterCert, perimeterKey []byte // CN=perimeter, bound to the project's ClusterRole
}

const (
	pkiCACert       = "ca.crt"
	pkiServingCert  = "apiserver.crt"
	pkiServingKey   = "apiserver.key"
	pkiSAKey        = "sa.key"
	pkiSAPub        = "sa.pub"
	perimeterUser   = "perimeter"
	adminUser       = "admin"
	mastersGroup    = "system:masters"
	serviceIPRange  = "198.19.240.0/20"
	firstServiceIP  = "198.19.240.1"
	certificateLife = 7 * 24 * time.Hour
)

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki dir: %w", err)
	}
	p := &pki{dir: dir}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock differences
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "perimeter-testenv-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(certificateLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(filepath.Join(dir, pkiCACert), p.caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write ca: %w", err)
	}

	sign := func(subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      subject,
			NotBefore:    now,
			NotAfter:     now.Add(certificateLife),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		keyPEM, err = encodeKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
	}

	servingCert, servingKey, err := sign(pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(firstServiceIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if err := writePair(dir, pkiServingCert, servingCert, pkiServingKey, servingKey); err != nil {
		return nil, err
	}
	if p.adminCert, p.adminKey, err = sign(pkix.Name{CommonName: adminUser, Organization: []string{mastersGroup}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return nil, fmt.Errorf("admin certificate: %w", err)
	}
	if p.perimeterCert, p.perimeterKey, err = sign(pkix.Name{CommonName: perimeterUser},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return nil, fmt.Errorf("perimeter certificate: %w", err)
	}

	// Service-account tokens are signed with this key (ES256).
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("service-account public key: %w", err)
	}
	if err := writePair(dir, pkiSAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		pkiSAKey, saKeyPEM); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func writePair(dir, certName string, cert []byte, keyName string, key []byte) error {
	if err := os.WriteFile(filepath.Join(dir, keyName), key, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyName, err)
	}
	if err := os.WriteFile(filepath.Join(dir, certName), cert, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", certName, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would still work.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
