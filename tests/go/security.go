package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
)

// tlsFromEnv: TLS when KBROKER_SECURITY_PROTOCOL is SSL or SASL_SSL, trusting the CA of
// KBROKER_CA_FILE (nil: plaintext), with the client certificate of KBROKER_CERT_FILE and
// KBROKER_KEY_FILE when they are set. The Go checks run against a kbroker listener of that
// protocol (tests/interop/test_security.py sets these variables).
func tlsFromEnv() *tls.Config {
	protocol := os.Getenv("KBROKER_SECURITY_PROTOCOL")
	if protocol != "SSL" && protocol != "SASL_SSL" {
		return nil
	}
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(os.Getenv("KBROKER_CA_FILE"))
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		fail("KBROKER_CA_FILE: cannot read a CA certificate: %v", err)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	// a client certificate (the broker's ssl.client.auth): KBROKER_CERT_FILE and KBROKER_KEY_FILE
	if certFile := os.Getenv("KBROKER_CERT_FILE"); certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, os.Getenv("KBROKER_KEY_FILE"))
		if err != nil {
			fail("KBROKER_CERT_FILE/KBROKER_KEY_FILE: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}
