"""Test certificates, made once per session with the `cryptography` package: a CA, a
broker certificate for 127.0.0.1 / localhost, client certificates (valid, expired,
self-signed, signed by another CA), as PEM files and one PKCS12 store.

    certs = make_certs(tmp_dir)
    certs.ca, certs.broker_pem (chain + key), certs.client_pem, certs.client_key ...
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PKCS12_PASSWORD = "p12-secret"


@dataclass
class Certs:
    dir: Path
    ca: Path  # the CA certificate (trust store)
    broker_pem: Path  # broker chain + key (ssl.keystore.type=PEM)
    broker_cert: Path
    broker_key: Path
    broker_p12: Path  # the same as PKCS12, password PKCS12_PASSWORD
    ca_p12: Path  # the CA as a PKCS12 trust store
    client_cert: Path  # CN=alice,OU=clients,O=kbroker tests
    client_key: Path
    client_pem: Path
    expired_pem: Path  # signed by the CA, expired yesterday
    self_signed_pem: Path  # CN=alice, signed by itself
    other_ca_pem: Path  # CN=alice, signed by a CA the broker does not trust


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kbroker tests"),
    ]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _cert(subject, key, issuer, issuer_key, *, ca=False, server=False, days=(-1, 365)):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=days[0]))
        .not_valid_after(now + datetime.timedelta(days=days[1]))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        b = b.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    elif not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_certs(directory) -> Certs:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    new_key = lambda: ec.generate_private_key(ec.SECP256R1())  # noqa: E731
    ca_key = new_key()
    ca_name = _name("kbroker test CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True, days=(-1, 3650))
    broker_key = new_key()
    broker = _cert(_name("localhost", "brokers"), broker_key, ca_name, ca_key, server=True)
    client_key = new_key()
    client = _cert(_name("alice", "clients"), client_key, ca_name, ca_key)
    expired = _cert(_name("alice", "clients"), client_key, ca_name, ca_key, days=(-30, -1))
    self_signed = _cert(_name("alice", "clients"), client_key, _name("alice", "clients"), client_key)
    other_key = new_key()
    other_name = _name("another CA")
    other = _cert(_name("alice", "clients"), client_key, other_name, other_key)

    def write(name: str, data: bytes) -> Path:
        p = d / name
        p.write_bytes(data)
        return p

    p12 = pkcs12.serialize_key_and_certificates(
        b"broker", broker_key, broker, [ca], serialization.BestAvailableEncryption(PKCS12_PASSWORD.encode())
    )
    ca_p12 = pkcs12.serialize_key_and_certificates(
        None, None, None, [ca], serialization.BestAvailableEncryption(PKCS12_PASSWORD.encode())
    )
    return Certs(
        dir=d,
        ca=write("ca.pem", _pem(ca)),
        broker_pem=write("broker.pem", _pem(broker) + _pem(ca) + _key_pem(broker_key)),
        broker_cert=write("broker-cert.pem", _pem(broker) + _pem(ca)),
        broker_key=write("broker-key.pem", _key_pem(broker_key)),
        broker_p12=write("broker.p12", p12),
        ca_p12=write("ca.p12", ca_p12),
        client_cert=write("client-cert.pem", _pem(client)),
        client_key=write("client-key.pem", _key_pem(client_key)),
        client_pem=write("client.pem", _pem(client) + _key_pem(client_key)),
        expired_pem=write("expired.pem", _pem(expired) + _key_pem(client_key)),
        self_signed_pem=write("self-signed.pem", _pem(self_signed) + _key_pem(client_key)),
        other_ca_pem=write("other-ca.pem", _pem(other) + _key_pem(client_key)),
    )
