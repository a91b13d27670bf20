"""The local CA and the gateway's loopback certificate (`nexus up` makes them in var/tls/)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from nexus.platform.tls import ensure_local_tls


def test_first_start_makes_a_ca_and_a_loopback_certificate_it_signed(tmp_path: Path) -> None:
    files = ensure_local_tls(tmp_path)
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert set(names.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    }
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    for private in (files.key, tmp_path / "tls" / "ca.key"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    # a TLS server context accepts the pair; a client context trusts the CA file
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.cert, files.key)
    ssl.create_default_context(cafile=str(files.ca_cert))


def test_later_starts_keep_the_files(tmp_path: Path) -> None:
    first = ensure_local_tls(tmp_path)
    before = {p: p.read_bytes() for p in (first.ca_cert, first.cert, first.key)}
    again = ensure_local_tls(tmp_path)
    assert again == first
    assert {p: p.read_bytes() for p in before} == before


def test_a_missing_server_certificate_is_reissued_by_the_same_ca(tmp_path: Path) -> None:
    files = ensure_local_tls(tmp_path)
    ca_before = files.ca_cert.read_bytes()
    files.cert.unlink()
    ensure_local_tls(tmp_path)
    assert files.ca_cert.read_bytes() == ca_before
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]
