"""TLS for the HTTP endpoint: a self-signed certificate for localhost and a sans-IO layer.

The certificate (``<data dir>/http/cert.pem``, key ``key.pem`` mode 0600) is made on first
use (the first HTTPS connection, or ``sbctl daemon cert``) with the ``cryptography``
library and kept across restarts, so a client trusts it once (``connection_verify``,
``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``). It is its own CA (basic constraints CA, key
usage for both) with the names ``localhost``, ``127.0.0.1`` and ``::1``.

:class:`TlsLayer` runs the server side of a TLS session over memory buffers
(``ssl.MemoryBIO`` + ``SSLObject``): the connection feeds it the bytes it already read
while telling TLS from AMQP and HTTP (daemon/README.md §30), then everything after.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import ssl
from pathlib import Path

CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"
VALID_DAYS = 3650


def cert_paths(data_dir: Path) -> tuple[Path, Path]:
    folder = data_dir / "http"
    return folder / CERT_FILE, folder / KEY_FILE


def ensure_certificate(data_dir: Path) -> tuple[Path, Path]:
    """The (certificate, key) paths, generating both when either is missing."""
    cert_path, key_path = cert_paths(data_dir)
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    cert_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The daemon (first HTTPS connection) and `sbctl daemon cert` may race: one makes both.
    lock = os.open(cert_path.parent / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
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
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def server_context(data_dir: Path) -> ssl.SSLContext:
    cert_path, key_path = ensure_certificate(data_dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_path, key_path)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class TlsError(Exception):
    """The peer's TLS failed (bad handshake, bad record): close the connection."""


class TlsLayer:
    """Server-side TLS over memory: ``receive`` ciphertext → plaintext, ``send`` the other way.

    ``data_to_send`` drains the ciphertext to write to the socket (handshake records too).
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self.handshaken = False
        self._pending: list[bytes] = []  # plaintext written before the handshake ended

    def receive(self, data: bytes) -> bytes:
        """Feed ciphertext; returns the plaintext now readable (maybe b"")."""
        self._in.write(data)
        try:
            if not self.handshaken:
                try:
                    self._obj.do_handshake()
                except ssl.SSLWantReadError:
                    return b""
                self.handshaken = True
                for chunk in self._pending:
                    self._obj.write(chunk)
                self._pending.clear()
            chunks = []
            while True:
                try:
                    chunk = self._obj.read(65536)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        except ssl.SSLError as exc:
            raise TlsError(exc.reason or str(exc)) from None

    def send(self, plaintext: bytes) -> None:
        if not self.handshaken:
            self._pending.append(plaintext)
            return
        try:
            self._obj.write(plaintext)
        except ssl.SSLError as exc:
            raise TlsError(exc.reason or str(exc)) from None

    def close(self) -> None:
        """Queue a close_notify (best effort)."""
        if self.handshaken:
            try:
                self._obj.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass

    def data_to_send(self) -> bytes:
        return self._out.read()
