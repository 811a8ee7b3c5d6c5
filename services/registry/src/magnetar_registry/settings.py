"""Registry settings (``MAGNETAR_*`` environment variables)."""

from __future__ import annotations

import socket

from pydantic import Field

from magnetar_runtime.settings import ServiceSettings


class RegistrySettings(ServiceSettings):
    port: int = 8070
    # Stable enough to tell registry processes apart in the `registries` table.
    registry_id: str = ""
    heartbeat_interval_ms: int = Field(1000, gt=0)
    # A coordinator or registry whose heartbeat is older than this is not live.
    lease_ttl_ms: int = Field(5000, gt=0)
    # How long connect/delete keep retrying to abort a fenced key's transactions.
    fence_timeout_ms: int = Field(30_000, gt=0)
    coordinator_request_timeout_ms: int = Field(10_000, gt=0)
    # The key gauges are refreshed from the database this often...
    metrics_interval_ms: int = Field(5000, gt=0)
    # ...and at most this many keys get their own `transaction_key` label (cardinality).
    metrics_max_labelled_keys: int = Field(100, ge=0)

    @property
    def resolved_registry_id(self) -> str:
        return self.registry_id or f"{socket.gethostname()}-{self.port}"
