"""The HTTPS endpoint's self-signed certificate for localhost, made on first use.

``<data dir>/http/cert.pem`` (key ``key.pem``, mode 0600) is made by the daemon at the
first HTTPS connection or by ``sbctl daemon cert``, with the ``cryptography`` library, and
kept across restarts, so a client trusts it once (``connection_verify``,
``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``). It is its own CA (basic constraints CA, key
usage for both) with the names ``localhost``, ``127.0.0.1`` and ``::1``. Shared by the CLI
and the daemon's HTTP front-end (:mod:`sbctld.frontends.http.tls`).
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
from pathlib import Path

from sbctl.core import layout

VALID_DAYS = 3650


def cert_paths(data_dir: Path) -> tuple[Path, Path]:
    return layout.cert_files(data_dir)


def ensure_certificate(data_dir: Path) -> tuple[Path, Path]:
    """The (certificate, key) paths, generating both when either is missing."""
    cert_path, key_path = cert_paths(data_dir)
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    cert_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The daemon (first HTTPS connection) and `sbctl daemon cert` may race: one makes both.
    lock = os.open(layout.cert_lock(data_dir), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cert_path.exists() and key_path.exists()):
            _generate(cert_path, key_path)
    finally:
        os.close(lock)
    return cert_path, key_path


def _generate(cert_path: Path, key_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost (sbctl)")])
    now = datetime.datetime.now(datetime.UTC)
    san = x509.SubjectAlternativeName(
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(san, critical=False)
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
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write(key_path, key_bytes, 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o600)  # (as all the dir)


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = layout.temp_sibling(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
