"""Storage lifecycle of the partitions this broker owns (docs/operations.md): messageTTL
expiry, backlog quotas and trimming, one BackgroundLoop pass over each partition.  The
decisions are partition/trimming.py's (pure); this module reads their inputs, applies
them and keeps every write lease-checked in SQL.

Policies (migration 0008) are cached per topic for ``storage_policy_cache_ms``, as the
permissions are (authorization.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from magnetar_broker import metrics
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.trimming import (
    evict_through,
    protected_from,
    quota_exceeded,
    trim_before,
    ttl_expire_through,
)
from magnetar_broker.partition.trimpace import TrimBudget, TrimPace, batch_cut, pause_after
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_broker.subscription.subscription import Subscription, durable
from magnetar_protocol.errors import SubscriptionNotFound
from magnetar_protocol.policies import EVICTION, Policies, Retention, resolve
from magnetar_protocol.topics import TopicName
from magnetar_runtime.failpoints import failpoint

log = logging.getLogger("magnetar.broker.lifecycle")

MAX_CACHED_TOPICS = 10000
INFINITE = Retention(-1, -1)
# Entries read per step when walking a backlog for TTL or eviction.
SCAN_ENTRIES = 2000

LoadPartition = Callable[[TopicName], Awaitable[PartitionLog]]


def now_ms() -> int:
    return int(time.time() * 1000)


class PolicyCache:
    def __init__(self, store: BrokerStore, settings: BrokerSettings):
        self.store = store
        self.cache_s = settings.storage_policy_cache_ms / 1000
        self.default_retention = Retention(settings.default_retention_time_minutes,
                                           settings.default_retention_size_mb)
        self.default_ttl_s = settings.default_message_ttl_s
        self.default_compaction_threshold = settings.default_compaction_threshold_bytes
        self._cache: dict[str, tuple[float, Policies]] = {}

    async def get(self, name: TopicName) -> Policies:
        topic = name.base.full  # a partitioned topic's policy covers its partitions
        now = time.monotonic()
        hit = self._cache.get(topic)
        if hit is not None and now - hit[0] < self.cache_s:
            return hit[1]
        ns_row, topic_row = await self.store.storage_policies(name.tenant, name.namespace, topic)
        found = resolve(self.default_retention, self.default_ttl_s, ns_row, topic_row,
                        self.default_compaction_threshold)
        if len(self._cache) >= MAX_CACHED_TOPICS:
            self._cache.clear()
        self._cache[topic] = (now, found)
        return found


class StorageLifecycle:
    def __init__(self, store: BrokerStore, settings: BrokerSettings, logs: Callable[[], list[PartitionLog]],
                 load: LoadPartition, compact: Callable[[PartitionLog], bool] | None = None):
        """``compact(plog)``: start a compaction of the partition unless one runs (the
        compactor's); a topic's compactionThreshold calls it."""
        self.store = store
        self._compact = compact
        self.settings = settings
        self.policies = PolicyCache(store, settings)
        self._logs = logs
        self._load = load
        self.pace = TrimPace(batch_entries=settings.trim_batch_entries, batch_bytes=settings.trim_batch_bytes,
                             duty=settings.trim_duty_percent / 100, min_pause_s=settings.trim_min_pause_ms / 1000,
                             max_pause_s=settings.trim_max_pause_ms / 1000,
                             partition_batches=settings.trim_max_batches, pass_batches=settings.trim_pass_batches)
        self.min_age_ms = settings.trim_min_age_s * 1000

    async def run_once(self) -> None:
        budget = TrimBudget(self.pace)
        for plog in await self._owned_logs():
            if plog.closed:
                continue
            try:
                await self.tend(plog, budget)
            except Exception:
                if not plog.closed:  # a lost lease ends the pass for this partition quietly
                    log.exception("storage lifecycle of %s failed; next tick retries", plog.name.full)
        metrics.LIFECYCLE_PASSES.inc()

    async def _owned_logs(self) -> list[PartitionLog]:
        """Every partition this broker owns that has a log.  One owned but not loaded (no
        client since this broker took it: after a restart, a hand-over or a lookup
        alone) is loaded here, or its acknowledged data and expired messages would wait
        for a client that may never come."""
        logs = self._logs()
        loaded = {plog.topic_id for plog in logs}
        for topic_id, topic in await self.store.owned_topics_with_entries():
            if topic_id in loaded:
                continue
            try:
                logs.append(await self._load(TopicName.parse(topic)))
            except Exception as exc:  # the lease moved meanwhile, or the topic went: not ours to tend
                log.debug("lifecycle could not load %s: %s", topic, exc)
        return logs

    async def tend(self, plog: PartitionLog, budget: TrimBudget) -> None:
        policies = await self.policies.get(plog.name)
        if policies.message_ttl_s > 0:
            await self.expire(plog, None, policies.message_ttl_s)
        plog.quota.install(lambda: self.check_quota_now(plog), self.settings.backlog_quota_recheck_ms,
                           self.settings.backlog_quota_hold_max_ms / 1000)
        await self.check_quota(plog, policies)
        await self.trim(plog, policies.retention, budget)
        await self.trim_outcomes(plog)
        if policies.compaction_threshold > 0:
            await self.check_compaction(plog, policies.compaction_threshold)

    # ---------------------------------------------------------------- compaction threshold

    async def check_compaction(self, plog: PartitionLog, threshold: int) -> bool:
        """Start a compaction when the log past the compaction horizon holds more than
        ``threshold`` bytes (Pulsar's compactionThreshold); whether one was started."""
        if self._compact is None:
            return False
        pending = await self.store.log_bytes(plog.topic_id, plog.compaction_horizon)
        if pending <= threshold:
            return False
        started = self._compact(plog)
        if started:
            log.info("compacting %s: %d bytes past its horizon, compactionThreshold %d", plog.name.full,
                     pending, threshold)
        return started

    # ---------------------------------------------------------------- expiry (the one primitive)

    async def _subscriptions(self, plog: PartitionLog, name: str | None) -> list[Subscription]:
        """The durable subscriptions ``name`` (or all of them, ``None``), loaded here."""
        names = await self.store.subscription_names(plog.topic_id)
        if name is not None:
            if name not in names:
                raise SubscriptionNotFound(f"subscription {name!r} does not exist on {plog.name.full}")
            names = [name]
        # Expiry and eviction act on every durable subscription, connected or not.
        return [await durable(plog, n) for n in names]

    async def expire(self, plog: PartitionLog, subscription: str | None, seconds: int) -> int:
        """Acknowledge, on ``subscription`` (every durable one for None), every message
        published more than ``seconds`` ago: messageTTL and the admin's expire-messages.
        Answers the entries the cursors moved over."""
        moved = 0
        cutoff_now = now_ms()
        for sub in await self._subscriptions(plog, subscription):
            through = None
            start = sub.cursor.mark_delete + 1
            while True:  # walk the backlog in steps until an entry is young enough
                metas = await self.store.entry_metas(plog.topic_id, start, plog.next_entry_id, SCAN_ENTRIES)
                step = ttl_expire_through(metas, seconds, cutoff_now)
                if step is None:
                    break
                through = step
                if step != metas[-1].entry_id:
                    break
                start = step + 1
            if through is not None:
                n = await sub.acknowledge_through(through)
                moved += n
                metrics.LIFECYCLE_EXPIRED.inc(n)
                if n:
                    log.info("expired %d entries older than %d s on %s subscription %s", n, seconds,
                             plog.name.full, sub.name)
        return moved

    # ---------------------------------------------------------------- backlog quota

    async def check_quota_now(self, plog: PartitionLog) -> None:
        """The send path's exact check (partition/quota.py): no eviction here, the pass evicts."""
        await self.check_quota(plog, await self.policies.get(plog.name), evict=False)

    async def check_quota(self, plog: PartitionLog, policies: Policies, evict: bool = True) -> None:
        quota = policies.quota
        gate = plog.quota
        gate.hold_s = self.settings.backlog_quota_hold_max_ms / 1000
        since = gate.appended_bytes
        if quota is None:
            gate.backlog.measured(None, False, 0, None)
            gate.set(None)
            return
        mark_deletes, _ = await self.store.trim_floor(plog.topic_id)
        if not mark_deletes:
            gate.backlog.measured(quota, False, 0, None)
            gate.set(None)
            return
        slowest = min(mark_deletes)
        backlog_bytes = await self.store.log_bytes(plog.topic_id, slowest + 1)
        oldest = await self.store.entry_metas(plog.topic_id, slowest + 1, plog.next_entry_id, 1)
        oldest_ms = oldest[0].publish_time_ms if oldest else None
        # Appends while the queries ran may be counted twice: the estimate errs high, safely.
        gate.backlog.measured(quota, True, backlog_bytes + gate.appended_bytes - since, oldest_ms)
        now = now_ms()
        if not quota_exceeded(quota, backlog_bytes, oldest_ms, now):
            gate.set(None)
            return
        if quota.policy == EVICTION:
            if evict:
                await self._evict(plog, quota, slowest, backlog_bytes, now)
            gate.set(None)
            return
        age = f", oldest unacknowledged {(now - oldest_ms) // 1000} s old" if oldest_ms is not None else ""
        gate.set(quota.policy, f"slowest subscription's backlog {backlog_bytes} bytes{age}; "
                                     f"limitSize {quota.limit_size}, limitTime {quota.limit_time} s")

    async def _evict(self, plog: PartitionLog, quota, slowest: int, backlog_bytes: int, now: int) -> None:
        metas = await self.store.entry_metas(plog.topic_id, slowest + 1, plog.next_entry_id, 100_000)
        through = evict_through(metas, backlog_bytes, quota, now)
        if through is None:
            return
        for sub in await self._subscriptions(plog, None):
            if sub.cursor.mark_delete < through:
                n = await sub.acknowledge_through(through)
                metrics.LIFECYCLE_EVICTED.inc(n)
                log.warning("backlog quota eviction: moved subscription %s of %s over %d entries",
                            sub.name, plog.name.full, n)

    # ---------------------------------------------------------------- trimming

    async def trim_outcomes(self, plog: PartitionLog) -> int:
        """Delete the partition's txn_outcomes rows that nothing can need any more (one
        bounded batch a pass: they are few next to entries); the rows deleted."""
        owned, deleted = await plog.lease_checked(
            "trimming transaction outcomes",
            self.store.trim_txn_outcomes(plog.topic_id, plog.epoch, self.pace.batch_entries), lambda r: r[0])
        metrics.TRIMMED_TXN_OUTCOMES.inc(deleted)
        return deleted

    async def trim(self, plog: PartitionLog, retention: Retention, budget: TrimBudget) -> int:
        """Delete what no rule keeps, in small batches paced by partition/trimpace.py (a
        large backlog must not hold sends up); the entries deleted."""
        if retention == INFINITE:
            return 0  # nothing can go: spare the database the queries
        total = None
        deleted = 0
        for _ in range(budget.partition()):
            started = time.monotonic()
            # Under the lock that opening a subscription takes, so a new subscription
            # from Earliest cannot start below what this batch deletes.
            async with plog.subscriptions.lock:
                plog.check_open()
                mark_deletes, pending_min = await self.store.trim_floor(plog.topic_id)
                compaction = plog.compacted.trim_floor()
                if compaction is not None:
                    # What is not in the compacted view yet stays, as Pulsar's
                    # compaction cursor holds its backlog (the view outlives the rest).
                    mark_deletes = [*mark_deletes, compaction - 1]
                bound = protected_from(plog.next_entry_id - 1, mark_deletes, pending_min)
                if bound <= plog.first_entry_id:
                    break
                if total is None and retention.size_mb > 0:
                    total = await self.store.log_bytes(plog.topic_id)
                metas = await self.store.entry_metas(plog.topic_id, plog.first_entry_id, bound,
                                                     self.pace.batch_entries)
                if not metas:  # ids below bound that were never stored (a hole): move on
                    plog.trimmed(bound)
                    break
                metas = metas[:batch_cut([m.size for m in metas], self.pace)]
                below = trim_before(metas, total or 0, retention, now_ms(), self.min_age_ms)
                if below is None:
                    break
                failpoint("broker.trim.before_delete")
                owned, entries, size = await plog.lease_checked(
                    "trimming", self.store.trim_entries(plog.topic_id, plog.epoch, below), lambda r: r[0])
                plog.trimmed(below)
                # A rule kept the rest of this batch's candidates (the minimum age, retention):
                # what ages meanwhile waits for the next pass, rather than a batch of a few
                # entries after every pause (bench/soak.py, 120 s minimum age: 13,280 batches
                # of 8.8 entries before, 1,114 of 133 after; docs/performance.md).
                rule_bound = below <= metas[-1].entry_id
            failpoint("broker.trim.after_delete")
            budget.spend()
            deleted += entries
            if total is not None:
                total -= size
            metrics.TRIMMED_ENTRIES.inc(entries)
            metrics.TRIMMED_BYTES.inc(size)
            took = time.monotonic() - started
            metrics.TRIM_BATCH_SECONDS.observe(took)
            pause = pause_after(took, self.pace)
            metrics.TRIM_PAUSE_SECONDS.inc(pause)
            await asyncio.sleep(pause)  # sends and dispatch get the database between batches
            if rule_bound:
                break
        if deleted:
            log.info("trimmed %d entries of %s (first entry now %d)", deleted, plog.name.full,
                     plog.first_entry_id)
        return deleted
