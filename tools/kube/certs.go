package main

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// runCerts makes a fresh CA and every certificate, key and kubeconfig the
// single-node cluster needs, into --dir (created 0700; keys 0600). It always
// makes new ones: scripts/kube.sh calls it at each start of a stopped cluster.
func runCerts() int {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	dir := fs.String("dir", "", "output directory (required)")
	nodeName := fs.String("node-name", "", "the kubelet's node name (required)")
	nodeIP := fs.String("node-ip", "", "the kubelet's node IP, put in its serving certificate (required)")
	server := fs.String("apiserver", "https://127.0.0.1:6443", "the API server URL written into the kubeconfigs")
	serviceIP := fs.String("service-ip", "", "first IP of the service CIDR (the kubernetes Service), put in the API server's certificate")
	validity := fs.Duration("validity", 365*24*time.Hour, "certificate lifetime")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *dir == "" || *nodeName == "" || *nodeIP == "" {
		fmt.Fprintln(os.Stderr, "certs: --dir, --node-name and --node-ip are required")
		return 2
	}
	if err := makeCerts(*dir, *nodeName, *nodeIP, *server, *serviceIP, *validity); err != nil {
		fmt.Fprintf(os.Stderr, "certs: %v\n", err)
		return 1
	}
	return 0
}

type keyPair struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	keyPEM  []byte
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(validity time.Duration) (*keyPair, error) {
	k, kp, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "open-bot-kube-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: c, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: k, keyPEM: kp}, nil
}

type certSpec struct {
	cn     string
	orgs   []string
	server bool // serverAuth; otherwise clientAuth
	dns    []string
	ips    []net.IP
}

func (ca *keyPair) issue(s certSpec, validity time.Duration) (*keyPair, error) {
	k, kp, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	eku := x509.ExtKeyUsageClientAuth
	if s.server {
		eku = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{eku},
		DNSNames:     s.dns,
		IPAddresses:  s.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, k.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: c, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: k, keyPEM: kp}, nil
}

// writeFile writes atomically: a temporary file in the same directory, then
// a rename, so a reader never sees half a key.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}

func makeCerts(dir, nodeName, nodeIPStr, server, serviceIPStr string, validity time.Duration) error {
	nodeIP := net.ParseIP(nodeIPStr)
	if nodeIP == nil {
		return fmt.Errorf("--node-ip %q is not an IP", nodeIPStr)
	}
	if strings.ContainsAny(nodeName, "/ \t\n") || nodeName != strings.ToLower(nodeName) {
		return fmt.Errorf("--node-name %q must be a lower-case DNS name", nodeName)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}

	ca, err := newCA(validity)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	apiIPs := []net.IP{net.ParseIP("127.0.0.1")}
	if serviceIPStr != "" {
		ip := net.ParseIP(serviceIPStr)
		if ip == nil {
			return fmt.Errorf("--service-ip %q is not an IP", serviceIPStr)
		}
		apiIPs = append(apiIPs, ip)
	}
	specs := map[string]certSpec{
		"apiserver": {cn: "kube-apiserver", server: true, ips: apiIPs,
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		// The API server's client certificate towards kubelets (logs, exec,
		// port-forward); the kubelet authorizes it through the API server.
		"apiserver-kubelet-client": {cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		"admin":                    {cn: "open-bot-kube-admin", orgs: []string{"system:masters"}},
		"controller-manager":       {cn: "system:kube-controller-manager"},
		"scheduler":                {cn: "system:kube-scheduler"},
		"kubelet":                  {cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}},
		"kubelet-serving":          {cn: "system:node:" + nodeName, server: true, dns: []string{nodeName, "localhost"}, ips: []net.IP{nodeIP, net.ParseIP("127.0.0.1")}},
	}
	pairs := map[string]*keyPair{}
	for name, s := range specs {
		kp, err := ca.issue(s, validity)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		pairs[name] = kp
	}

	// Service-account token signing key: RSA, as every client expects.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		return err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}

	var errs []error
	w := func(name string, data []byte, mode os.FileMode) {
		errs = append(errs, writeFile(filepath.Join(dir, name), data, mode))
	}
	w("ca.crt", ca.certPEM, 0o644)
	w("ca.key", ca.keyPEM, 0o600)
	for name, kp := range pairs {
		w(name+".crt", kp.certPEM, 0o644)
		w(name+".key", kp.keyPEM, 0o600)
	}
	w("sa.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER}), 0o600)
	w("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}), 0o644)

	for _, kc := range []struct{ file, pair, user string }{
		{"admin.kubeconfig", "admin", "admin"},
		{"controller-manager.kubeconfig", "controller-manager", "system:kube-controller-manager"},
		{"scheduler.kubeconfig", "scheduler", "system:kube-scheduler"},
		{"kubelet.kubeconfig", "kubelet", "system:node:" + nodeName},
	} {
		data, err := kubeconfig(server, ca.certPEM, kc.user, pairs[kc.pair])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", kc.file, err))
			continue
		}
		w(kc.file, data, 0o600)
	}
	return errors.Join(errs...)
}

// kubeconfig renders a kubeconfig with everything embedded, so it can be
// copied elsewhere on the machine and still work.
func kubeconfig(server string, caPEM []byte, user string, kp *keyPair) ([]byte, error) {
	const cluster, ctx = "open-bot-kube", "open-bot-kube"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: bytes.Clone(caPEM)}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts[ctx] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user}
	cfg.CurrentContext = ctx
	return clientcmd.Write(*cfg)
}
