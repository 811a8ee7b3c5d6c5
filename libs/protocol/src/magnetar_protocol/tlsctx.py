"""The TLS context a caller of a Magnetar service uses (the client library, the admin
CLI, and the services' own calls to each other): the server is verified against a CA
file (else the system's trust store) and, unless told otherwise, its name; a client
certificate is presented when the server asks for one (mutual TLS).  Parameter names
follow the ``pulsar-client`` wheel's."""

from __future__ import annotations

import ssl


def client_context(tls_trust_certs_file_path: str | None = None,
                   tls_certificate_file_path: str | None = None,
                   tls_private_key_file_path: str | None = None,
                   tls_validate_hostname: bool = True,
                   tls_allow_insecure_connection: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=tls_trust_certs_file_path or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls_allow_insecure_connection:  # pulsar-client's escape hatch: no verification at all
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = tls_validate_hostname
    if tls_certificate_file_path:
        ctx.load_cert_chain(tls_certificate_file_path, tls_private_key_file_path or None)
    return ctx
