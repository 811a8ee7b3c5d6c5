"""Coordinator settings (``MAGNETAR_*`` environment variables)."""

from __future__ import annotations

import re
import socket

from pydantic import Field, field_validator

from magnetar_runtime.settings import ServiceSettings


class CoordinatorSettings(ServiceSettings):
    # The TCID: MAGNETAR_COORDINATOR_ID, else the StatefulSet ordinal (hostname "...-N").
    coordinator_id: int | None = Field(None, ge=0)
    default_txn_timeout_ms: int = Field(60_000, gt=0)
    max_txn_timeout_ms: int = Field(3 * 3600_000, gt=0)
    heartbeat_interval_ms: int = Field(1000, gt=0)
    lease_ttl_ms: int = Field(5000, gt=0)
    timeout_check_interval_ms: int = Field(200, gt=0)
    # Ended transactions keep their outcome this long, so late duplicates get a precise answer.
    ended_retention_s: int = Field(24 * 3600, ge=0)
    txn_id_block: int = Field(1000, gt=0)
    # A client's pool (NewTxn with count): at most this many per request, handed out
    # within at most this long of the reply (the pooled deadlines are that much later).
    max_txn_pool: int = Field(64, gt=0)
    max_txn_hold_ms: int = Field(5000, ge=0)
    broker_request_timeout_ms: int = Field(10_000, gt=0)
    # Per-role limits (txnlimits.py; superusers exempt, so nothing applies with
    # authentication off).  Global, not per namespace: a transaction has no namespace
    # when it is opened.  Per coordinator: a role may hold this many OPEN on each.
    # 10,000: a client holds one transaction, or a pool of 64, per thread; a Spark job
    # one per task; a role with no grants held 197,004 in 2.9 s before (issue 24).  0: none.
    max_open_txns_per_role: int = Field(10_000, ge=0)
    # New transactions per second per role and coordinator (burst: one second's worth);
    # the transaction benchmarks reach ~2,000/s on the 2-core machine.  0: none.
    max_new_txns_per_role_per_s: float = Field(5_000, ge=0)
    # How often the OPEN counts are read back from the database (ended transactions
    # stop counting then).
    txn_limit_refresh_s: float = Field(5.0, gt=0)
    # A broker hosting this coordinator ends a transaction whose participants it all
    # serves in one SQL transaction (issue 18); false keeps the two-phase path for every
    # transaction (to compare the two in one build).  No effect on a coordinator process.
    one_phase_commit: bool = True
    # A broker hosting this coordinator commits a small transaction whose sends and acks
    # travel with its commit in one request and one SQL transaction (issue 26); false:
    # it does not offer /v1/txn/end-one-request, and clients end every transaction the
    # classic way.  No effect on a coordinator process (it serves no partition).
    one_request_commit: bool = True

    @field_validator("coordinator_id", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # Kubernetes sets MAGNETAR_COORDINATOR_ID from the pod-index label; on clusters
        # without that label it is empty, and the hostname's ordinal is used instead.
        return None if value == "" else value

    def resolved_coordinator_id(self) -> int:
        if self.coordinator_id is not None:
            return self.coordinator_id
        host = socket.gethostname()
        if m := re.search(r"-(\d+)$", host):
            return int(m.group(1))
        raise SystemExit(
            f"magnetar-coordinator: cannot tell this coordinator's id: set "
            f"MAGNETAR_COORDINATOR_ID, or run it with a hostname ending in -N (got {host!r})"
        )
