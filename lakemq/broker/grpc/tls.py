"""TLS for the gRPC front door: the configured certificate and key (``grpcTlsCertPath``,
``grpcTlsKeyPath``, PEM), or a self-signed pair made at start when none is configured, as
RocketMQ's proxy does (the 5.x Java client uses TLS by default and trusts any certificate).

The made pair lives in memory only: an EC P-256 key and a certificate for brokerIP1,
127.0.0.1 and localhost, valid ten years. The server side always offers ALPN ``h2``, which
gRPC clients require.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lakemq.errors import ConfigError

__all__ = ["TlsMaterial", "server_ssl_context", "tls_material"]


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    cert_pem: bytes
    key_pem: bytes
    self_signed: bool


def _self_signed(host: str) -> TlsMaterial:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lakemq broker")])
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        names.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return TlsMaterial(cert.public_bytes(serialization.Encoding.PEM), key_pem, True)


def tls_material(cert_path: str, key_path: str, host: str) -> TlsMaterial:
    """The configured pair (both paths or neither), else a self-signed one for ``host``."""
    if bool(cert_path) != bool(key_path):
        raise ConfigError("grpcTlsCertPath and grpcTlsKeyPath go together: set both or neither")
    if not cert_path:
        return _self_signed(host)
    try:
        return TlsMaterial(Path(cert_path).read_bytes(), Path(key_path).read_bytes(), False)
    except OSError as exc:
        raise ConfigError(f"the gRPC TLS certificate or key cannot be read: {exc}") from exc


def server_ssl_context(material: TlsMaterial) -> ssl.SSLContext:
    """A server context with the pair loaded (ssl reads key files only: a private temporary
    directory holds them for the moment of loading) and ALPN h2."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="lakemq-tls-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_bytes(material.cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(material.key_pem)
        context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    return context
