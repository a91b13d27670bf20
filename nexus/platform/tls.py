"""A local certificate authority and a loopback server certificate for the gateway's HTTPS port.

`nexus up` calls `ensure_local_tls(var_dir)` on every start: the first start creates
`<var>/tls/ca.pem` (the CA a client trusts), `ca.key`, `server.pem` and `server.key` (keys
0600, directory 0700). Later starts keep them, and reissue only a server certificate that is
missing or expires within `RENEW_BEFORE`. The server certificate names 127.0.0.1, ::1 and
localhost. Production deployments give the gateway their own certificate and key instead
(`NEXUS_GATEWAY_TLS_CERT_FILE`, `NEXUS_GATEWAY_TLS_KEY_FILE`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nexus.platform.files import write_private

CA_VALIDITY = dt.timedelta(days=3650)
SERVER_VALIDITY = dt.timedelta(days=397)
RENEW_BEFORE = dt.timedelta(days=30)
SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    cert: Path
    key: Path


def tls_dir(var_dir: Path) -> Path:
    return var_dir / "tls"


def ensure_local_tls(var_dir: Path) -> TlsFiles:
    """The local CA and a current server certificate under `<var>/tls/`, made when missing."""
    directory = tls_dir(var_dir)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    ca_key_path = directory / "ca.key"
    if not (files.ca_cert.is_file() and ca_key_path.is_file()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        write_private(ca_key_path, _pem_key(ca_key), replace=True)
        files.ca_cert.write_bytes(_ca_cert(ca_key).public_bytes(serialization.Encoding.PEM))
        files.cert.unlink(missing_ok=True)  # signed by the old CA, if any
    if _needs_server_cert(files.cert):
        loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca_key_path} is not an EC private key")
        ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        write_private(files.key, _pem_key(key), replace=True)
        cert = _server_cert(key, ca, loaded)
        write_private(files.cert, cert.public_bytes(serialization.Encoding.PEM), replace=True)
    return files


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _needs_server_cert(path: Path) -> bool:
    if not path.is_file():
        return True
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return cert.not_valid_after_utc - RENEW_BEFORE < dt.datetime.now(dt.UTC)


def _ca_cert(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Nexus local development CA")])
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_cert(
    key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in SERVER_ADDRESSES]
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + SERVER_VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
