"""A certificate authority and certificates made on this machine, for
``magnetar-local run --tls`` and for the tests: what cert-manager or an operator's own
CA gives a Kubernetes deployment (a CA file, and a certificate and key per service).

One certificate serves every local service and PostgreSQL: its names are the loopback
ones the local cluster advertises (``localhost``, ``127.0.0.1``, ``::1``), and it is
valid for both server and client authentication, so it also proves a service to its
peers when mutual TLS is on.  ``issue`` takes other names and validity for tests (a
certificate that expired, one for another host)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Ca:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class Issued:
    cert_file: Path
    key_file: Path


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)  # PostgreSQL refuses a key others can read


def make_ca(directory: Path | str, name: str = "Magnetar local CA") -> Ca:
    """A self-signed CA (ca.crt, ca.key) valid for ten years."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - dt.timedelta(minutes=5))
            .not_valid_after(_now() + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    ca = Ca(directory / "ca.crt", directory / "ca.key")
    ca.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca.key_file, key)
    return ca


def issue(ca: Ca, directory: Path | str, name: str, hosts: tuple[str, ...] = LOCAL_NAMES,
          valid_from: dt.datetime | None = None, valid_days: float = 825) -> Issued:
    """``name``.crt and ``name``.key signed by ``ca``, for ``hosts`` (DNS names or IP
    addresses), usable by a server and a client."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_file.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key_file.read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    start = valid_from or _now() - dt.timedelta(minutes=5)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + dt.timedelta(days=valid_days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    issued = Issued(directory / f"{name}.crt", directory / f"{name}.key")
    issued.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(issued.key_file, key)
    return issued
