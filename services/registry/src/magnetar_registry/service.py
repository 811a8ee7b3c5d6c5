"""Registry logic: connecting keyed clients (epoch bump, fencing the previous holder by
aborting its transactions through their coordinators), deleting keys, and the key
metrics.  docs/transaction-keys.md tells the whole story."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    InvalidTxnStatusError,
    MagnetarError,
    NotAllowedError,
    NotFound,
    ServiceNotReady,
    Timeout,
    TransactionKeyNotFound,
    TransactionNotFound,
)
from magnetar_protocol.keys import identity, key_problem
from magnetar_protocol.txnid import TxnID
from magnetar_registry import metrics
from magnetar_registry.binding import choose_coordinator, connect_outcome
from magnetar_registry.settings import RegistrySettings
from magnetar_registry.store import LiveCoordinators, RegistryStore
from magnetar_runtime.auth import Authenticator, current_role
from magnetar_runtime.loops import BackgroundLoop
from magnetar_runtime.rpc import RpcClient

log = logging.getLogger("magnetar.registry")


class RegistryService:
    def __init__(self, store: RegistryStore, settings: RegistrySettings,
                 auth: Authenticator | None = None):
        self.store = store
        self.settings = settings
        self.auth = auth or Authenticator(settings)
        self.ttl_s = settings.lease_ttl_ms / 1000
        self.rpc = RpcClient(settings.coordinator_request_timeout_ms / 1000, self.auth.headers())
        self.ready = False
        self.heartbeat_loop = BackgroundLoop("registry-heartbeat", settings.heartbeat_interval_ms / 1000,
                                             self.heartbeat)
        self.metrics_loop = BackgroundLoop("key-metrics", settings.metrics_interval_ms / 1000,
                                           self.refresh_metrics)
        self._labelled: set[str] = set()
        self._coordinators = LiveCoordinators({}, [])
        self._coordinators_at = float("-inf")

    async def start(self) -> None:
        await self.heartbeat()
        self.heartbeat_loop.start()
        self.metrics_loop.start()
        self.ready = True
        log.info("registry %s serving at %s", self.store.instance, self.settings.url)

    async def stop(self) -> None:
        self.ready = False
        for loop in (self.heartbeat_loop, self.metrics_loop):
            await loop.stop()
        try:
            await self.store.deregister()
        except Exception as exc:  # the database may be gone; the lease lapses anyway
            log.warning("could not deregister: %s", exc)
        await self.rpc.close()

    async def heartbeat(self) -> None:
        await self.store.heartbeat(self.settings.url)

    # ---------------------------------------------------------------- connect

    async def connect(self, req: pb.ConnectKeyRequest) -> pb.ConnectKeyResponse:
        if problem := key_problem(req.transaction_key):
            raise BadRequest(problem)
        owner, key = current_role(), req.transaction_key
        started = time.perf_counter()
        existing = None if req.epoch == -1 else await self.store.get_key(owner, key)
        outcome = connect_outcome(existing.epoch if existing else None,
                                  bool(existing and existing.deleted), req.epoch)
        coordinators, bindable = await self._live_coordinators()
        # A key bound to a TCID whose process is gone moves to a live one (binding.py).
        rebind_to = choose_coordinator(identity(owner, key), bindable) if bindable else None
        if outcome == "refuse":
            metrics.CONNECTS.labels("refused").inc()
            now = "never connected" if existing is None else (
                "deleted" if existing.deleted else f"at epoch {existing.epoch}")
            raise NotAllowedError(
                f"transaction key {identity(owner, key)!r} is {now}; epoch {req.epoch} is not "
                "current: a newer connection fenced this client (connect with -1 to take over)")
        if outcome == "resume":
            binding = await self.store.connect_resume(owner, key, req.epoch, rebind_to, bindable)
            if binding is None:  # fenced between the read and the write
                metrics.CONNECTS.labels("refused").inc()
                raise NotAllowedError(f"transaction key {identity(owner, key)!r} moved past epoch "
                                      f"{req.epoch}: a newer connection fenced this client")
            metrics.CONNECTS.labels("resumed").inc()
        else:
            if rebind_to is None:
                raise ServiceNotReady("no transaction coordinator is live to bind the key to; "
                                      "retry once one runs")
            binding = await self.store.connect_new(owner, key, rebind_to, bindable)
            # Fence: every transaction of an older epoch ends before we answer.
            fenced = await self._abort_older(owner, key, binding.epoch)
            metrics.CONNECTS.labels("new").inc()
            if fenced:
                metrics.FENCES.inc(len(fenced))
                metrics.FENCE_LATENCY.observe(time.perf_counter() - started)
                log.info("key %s: epoch %d fenced %d transaction(s) in %.1f ms", identity(owner, key),
                         binding.epoch, len(fenced), (time.perf_counter() - started) * 1000)
        return pb.ConnectKeyResponse(epoch=binding.epoch, coordinator_id=binding.coordinator_id,
                                     coordinator_url=coordinators.get(binding.coordinator_id, ""))

    async def _live_coordinators(self, fresh: bool = False) -> LiveCoordinators:
        """(live TCID -> the URL answering for it, the TCIDs keys may be bound to), cached
        for a heartbeat interval (connects are frequent)."""
        now = time.monotonic()
        if fresh or now - self._coordinators_at > self.settings.heartbeat_interval_ms / 1000:
            self._coordinators = await self.store.live_coordinators(self.ttl_s)
            self._coordinators_at = now
        return self._coordinators

    async def _abort_older(self, owner: str, key: str, epoch: int) -> list[pb.TxnId]:
        """Abort (as expired) every unfinished transaction of the key opened under an
        older epoch, through its coordinator's normal abort path; return them."""
        stale = await self.store.unfinished_older(owner, key, epoch)
        txns = [TxnID(t.coordinator_id, t.txn_id).to_wire() for t in stale]
        await asyncio.gather(*(self._abort_expired(t) for t in txns))
        return txns

    async def _abort_expired(self, txn: pb.TxnId) -> None:
        deadline = time.monotonic() + self.settings.fence_timeout_ms / 1000
        delay = 0.02
        request = pb.EndTxnRequest(txn=txn, action=pb.TXN_ABORT, expired=True)
        while True:
            url = (await self._live_coordinators(fresh=delay > 0.02)).urls.get(txn.most_bits)
            try:
                if url:
                    await self.rpc.call(url, "/v1/txn/end", request, pb.EndTxnResponse)
                    return
                problem = f"coordinator {txn.most_bits} is not live"
            except (InvalidTxnStatusError, TransactionNotFound):
                # It committed before the fence took hold, or was purged: nothing to abort.
                return
            except MagnetarError as exc:
                if not exc.retryable and not isinstance(exc, (ServiceNotReady, NotFound)):
                    raise
                problem = str(exc)
            if time.monotonic() > deadline:
                raise Timeout(f"could not abort transaction {TxnID.from_wire(txn)} of "
                              f"a fenced key within {self.settings.fence_timeout_ms} ms: {problem}; "
                              "connect again to retry")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    # ---------------------------------------------------------------- delete

    async def delete(self, req: pb.DeleteKeyRequest) -> pb.DeleteKeyResponse:
        if problem := key_problem(req.transaction_key):
            raise BadRequest(problem)
        owner = req.owner or current_role()
        self.auth.require_owner_or_superuser(owner, f"deleting transaction key {req.transaction_key!r}")
        epoch = await self.store.delete_key(owner, req.transaction_key)
        if epoch is None:
            raise TransactionKeyNotFound(f"transaction key {identity(owner, req.transaction_key)!r} does not exist")
        aborted = await self._abort_older(owner, req.transaction_key, epoch)
        log.info("deleted key %s (tombstone at epoch %d), aborted %d transaction(s)",
                 identity(owner, req.transaction_key), epoch, len(aborted))
        return pb.DeleteKeyResponse(aborted=aborted)

    # ---------------------------------------------------------------- metrics

    async def refresh_metrics(self) -> None:
        metrics.KEY_COUNT.set(await self.store.key_count())
        labelled = set()
        for owner, key, epoch, idle_s in await self.store.recent_keys(
                self.settings.metrics_max_labelled_keys):
            label = identity(owner, key)
            labelled.add(label)
            metrics.KEY_EPOCH.labels(label).set(epoch)
            metrics.KEY_AGE.labels(label).observe(idle_s)
        for gone in self._labelled - labelled:  # keep the label set bounded
            metrics.KEY_EPOCH.remove(gone)
            metrics.KEY_AGE.remove(gone)
        self._labelled = labelled


def new_instance_id() -> str:
    return uuid.uuid4().hex[:12]
