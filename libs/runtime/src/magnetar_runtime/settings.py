"""Settings common to every service, read from ``MAGNETAR_*`` environment variables."""

from __future__ import annotations

import re
import socket

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from magnetar_protocol.listeners import (
    INTERNAL,
    expand_pod_index,
    parse_listeners,
    resolve_internal,
)


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MAGNETAR_", extra="ignore")

    database_url: str = "postgresql://magnetar@127.0.0.1:5432/magnetar"
    host: str = "127.0.0.1"
    port: int = 8080
    # The URL other processes use to reach this one (defaults to http://host:port).
    advertised_url: str = ""
    # Other URLs this process is reached at, by name (Pulsar's advertisedListeners), e.g.
    # "external:http://1.2.3.4:30080" for clients outside the cluster; lookups answer
    # the one a client names (listener_name).  Empty: only the internal one above.
    advertised_listeners: str = ""
    # This pod's StatefulSet ordinal, for "{pod_index}" in the listeners' URLs (a
    # NodePort per pod: "external:http://203.0.113.10:{30080+pod_index}"); unset or
    # empty (a cluster without the pod-index label): the hostname's "-N".
    pod_index: int | None = None
    log_level: str = "INFO"
    log_format: str = "json"  # json | text
    db_pool_size: int = 10
    # Authentication (docs/security.md): off by default locally, on in the Helm chart.
    # With it on, every request but /healthz, /readyz and /metrics needs a JWT bearer
    # token whose `sub` is the caller's role.
    auth_enabled: bool = False
    auth_jwt_secret: str = ""        # HS256 shared secret
    auth_jwt_public_key: str = ""    # RS256 public key (PEM); wins over the secret
    auth_superuser_roles: str = ""   # comma-separated; may use every admin endpoint
    # The token this process presents to other services.  Default: one it signs itself
    # with the HS256 secret for the first superuser role (RS256 needs it given).
    auth_service_token: str = ""

    # TLS on every port this process serves and for its calls to other services
    # (docs/security.md, "Transport security").  Off by default locally (`magnetar-local
    # run --tls` turns it on); the files are what a Kubernetes Secret mounts (cert-manager:
    # tls.crt, tls.key, ca.crt).  The CA verifies the services this one calls (and, with
    # client certificates required, its clients); empty: the system's trust store.
    tls_enabled: bool = False
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_file: str = ""
    # Mutual TLS: refuse a client (another service, or a user) without a certificate the
    # CA signed.  Off by default: clients authenticate with tokens, as in Pulsar.
    tls_require_client_cert: bool = False
    # How often the files are checked for a new certificate (a renewal is picked up
    # without a restart; cert-manager renews 30 days ahead by default).
    tls_reload_interval_s: float = Field(10.0, gt=0)

    # Request limits (docs/security.md, "Limits"), checked as the bytes arrive, before a
    # request reaches the app and its authentication.
    # Pulsar's default maxMessageSize; a producer batch may be this big (plus framing).
    max_message_size: int = Field(5 * 1024 * 1024, gt=0)
    # A request's head (request line and headers): a JWT is at most auth_max_token_bytes,
    # everything else a client sends fits in 1 KiB; nginx's default is 4 x 8 KiB.
    max_header_bytes: int = Field(32 * 1024, gt=0)
    # A request's body; 0: max_message_size + 1 MiB (one batch of the largest size with
    # its framing; clients cap a send-batches request at max_message_size).
    max_body_bytes: int = Field(0, ge=0)
    # A request's head must arrive within this (slow loris); a whole head is one packet.
    header_read_timeout_s: float = Field(10.0, gt=0)
    # A request's body must arrive within this after its head: a 6 MiB batch takes well
    # under a second on any network a broker is reached over; a trickling body (issue 24)
    # no longer holds a connection and its bytes for ever.
    body_read_timeout_s: float = Field(60.0, gt=0)
    # ... and at least this many bytes per second on average once body_rate_grace_s has
    # passed (Kestrel's MinRequestBodyDataRate is 240 B/s after 5 s; a client that
    # sends at all sends far faster).
    body_min_bytes_per_s: int = Field(1024, ge=0)
    body_rate_grace_s: float = Field(5.0, ge=0)
    # Bytes of unfinished request bodies one process may hold at once (503 past it): 20
    # of the largest batches in flight together; 60 stalled 5.5 MB bodies took a broker
    # from 143 to 478 MB before.
    max_pending_body_bytes: int = Field(128 * 1024 * 1024, gt=0)
    # Tokens longer than this are refused before any decoding (an RS256 JWT is ~0.5-1 KiB).
    auth_max_token_bytes: int = Field(8 * 1024, gt=0)

    @property
    def body_limit(self) -> int:
        return self.max_body_bytes or self.max_message_size + 1024 * 1024

    @field_validator("pod_index", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        return None if value == "" else value

    @model_validator(mode="after")
    def _tls_files_given(self):
        if self.tls_enabled and not (self.tls_cert_file and self.tls_key_file):
            raise ValueError("MAGNETAR_TLS_ENABLED is set: give MAGNETAR_TLS_CERT_FILE and "
                             "MAGNETAR_TLS_KEY_FILE (and MAGNETAR_TLS_CA_FILE to verify peers)")
        return self

    @model_validator(mode="after")
    def _listeners_valid(self):
        # A bad entry stops the process at start, naming it.
        resolve_internal(self.advertised_url, self._all_listeners())
        return self

    def _all_listeners(self) -> dict[str, str]:
        return parse_listeners(self._with_pod_index(self.advertised_listeners))

    def _with_pod_index(self, text: str) -> str:
        """``text`` with this pod's ordinal in its placeholders (MAGNETAR_POD_INDEX, else
        the hostname's "-N")."""
        index = self.pod_index
        if index is None and "{" in text:
            found = re.search(r"-(\d+)$", socket.gethostname())
            index = int(found.group(1)) if found else None
        return expand_pod_index(text, index)

    @property
    def url(self) -> str:
        internal = resolve_internal(self.advertised_url, self._all_listeners())
        return internal or f"{'https' if self.tls_enabled else 'http'}://{self.host}:{self.port}"

    @property
    def listeners(self) -> dict[str, str]:
        """The non-internal advertised listeners: name -> URL."""
        return {name: url for name, url in self._all_listeners().items() if name != INTERNAL}
