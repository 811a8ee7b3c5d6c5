"""TLS for every hop, configured as Kubernetes users do: a certificate, its key and a CA,
each a file (mounted from a Secret; cert-manager writes ``tls.crt``, ``tls.key`` and
``ca.crt``).  One place builds this process's contexts:

- ``server_ssl()``: what its HTTP port and (brokers) its Pulsar port present; with
  ``MAGNETAR_TLS_REQUIRE_CLIENT_CERT`` every client must present a certificate the CA
  signed (mutual TLS);
- ``client_ssl()``: what its calls to other services use: the CA verifies the peer and
  its name, and its own certificate proves it when the peer asks.

Certificates are reloaded without a restart: ``CertWatcher`` re-reads the files when
they change (a Secret's update, cert-manager's renewal) and loads them into the same
contexts, which every new connection then uses; established connections keep the
certificate they were made with.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass

from magnetar_protocol.tlsctx import client_context

log = logging.getLogger("magnetar.tls")


@dataclass(frozen=True)
class TlsFiles:
    cert_file: str
    key_file: str
    ca_file: str = ""          # empty: the system's trust store
    require_client_cert: bool = False

    @classmethod
    def of(cls, settings) -> TlsFiles | None:
        """From a service's settings; None when TLS is off."""
        if not settings.tls_enabled:
            return None
        return cls(settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file,
                   settings.tls_require_client_cert)


def server_context(files: TlsFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(ctx, files)
    if files.require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _load(ctx: ssl.SSLContext, files: TlsFiles) -> None:
    ctx.load_cert_chain(files.cert_file, files.key_file)
    if files.ca_file:
        ctx.load_verify_locations(files.ca_file)


# This process's contexts, set once by ``configure`` (serve.py) before the app starts.
_server: ssl.SSLContext | None = None
_client: ssl.SSLContext | None = None
_files: TlsFiles | None = None


def configure(files: TlsFiles | None) -> None:
    global _server, _client, _files
    _files = files
    if files is None:
        _server = _client = None
        return
    _server = server_context(files)
    _client = client_context(files.ca_file, files.cert_file, files.key_file)


def server_ssl() -> ssl.SSLContext | None:
    return _server


def client_ssl() -> ssl.SSLContext | None:
    """For aiohttp's ``ssl=``: None when TLS is off (then https:// URLs verify against
    the system's CAs, aiohttp's default)."""
    return _client


class CertWatcher:
    """Reloads the process's certificate, key and CA into its contexts when the files
    change; ``run_once`` is one check (a BackgroundLoop calls it)."""

    def __init__(self, files: TlsFiles, contexts: list[ssl.SSLContext]) -> None:
        self.files = files
        self.contexts = contexts
        self._stamp = self._stamps()
        self.reloads = 0

    def _stamps(self) -> tuple:
        stamps = []
        for path in (self.files.cert_file, self.files.key_file, self.files.ca_file):
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            stamps.append(None if st is None else (st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamps)

    async def run_once(self) -> None:
        stamp = self._stamps()
        if stamp == self._stamp:
            return
        try:
            for ctx in self.contexts:
                _load(ctx, self.files)
        except (OSError, ssl.SSLError, ValueError) as exc:
            # A certificate and key written one after the other may not match for a
            # moment: keep serving the old pair and try again on the next check.
            log.warning("TLS files changed but could not be loaded yet (%s); keeping the "
                        "certificate in use", exc)
            return
        self._stamp = stamp
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.files.cert_file)


def watcher() -> CertWatcher | None:
    """A watcher of this process's files and contexts (None when TLS is off)."""
    if _files is None:
        return None
    return CertWatcher(_files, [c for c in (_server, _client) if c is not None])
