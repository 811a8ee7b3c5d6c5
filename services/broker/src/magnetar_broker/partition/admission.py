"""Admission of a send to a partition: the checks a batch must pass before it is queued
(open, not fenced, backlog quota, not terminated, the size and shape rules, the
transaction's state) and the PIP-6 dedup verdict.  It answers a queue item for the
writer, or the duplicate's reply; it writes nothing."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from magnetar_broker import metrics
from magnetar_broker.partition.batchcheck import BatchProblem, BatchShape, checked_batch, schema_problem
from magnetar_broker.partition.dedup import Verdict, drop_persisted, judge
from magnetar_broker.partition.dedupstate import DedupState
from magnetar_broker.partition.planner import Append, TxnAppend
from magnetar_broker.partition.quotagate import QuotaGate
from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.partition.txnbuffer import TxnBuffer
from magnetar_protocol.errors import BadRequest, IncompatibleSchema, MessageTooBig, NotAllowedError
from magnetar_protocol.policies import DelayedDelivery
from magnetar_protocol.topics import TopicName

# Room for batch framing and per-message metadata on top of the payload limit.
BATCH_OVERHEAD = 64 * 1024


class Sender(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def payload_check(self) -> Callable[[bytes], str | None] | None: ...
    def check_not_fenced(self) -> None: ...


class Door(Protocol):
    """What admission needs of its partition."""

    @property
    def name(self) -> TopicName: ...
    @property
    def partition_index(self) -> int: ...
    @property
    def delayed_delivery(self) -> DelayedDelivery: ...
    def check_open(self) -> None: ...
    def check_not_terminated(self) -> None: ...


def batch_size_problem(size: int, max_message_size: int) -> str | None:
    """The one size rule of a stored batch: its payload limit plus room for framing."""
    if size > max_message_size + BATCH_OVERHEAD:
        return f"batch of {size} bytes exceeds the maximum message size of {max_message_size} bytes"
    return None


class Admission:
    def __init__(self, door: Door, dedup: DedupState, txnbuf: TxnBuffer, quota: QuotaGate,
                 writer_idle: Callable[[], Awaitable[None]], max_message_size: int,
                 max_batch_messages: int) -> None:
        self.door = door
        self.dedup = dedup
        self.txnbuf = txnbuf
        self.quota = quota
        self._writer_idle = writer_idle
        self.max_message_size = max_message_size
        self.max_batch_messages = max_batch_messages

    async def check(self, producer: Sender, req: Batch) -> BatchShape:
        """A batch's own rules, whatever becomes of it: the partition open and taking
        sends, the producer not fenced, the backlog quota (which may hold the send), the
        batch's size and shape (returned), its payloads against the producer's schema
        under schemaValidationEnforced."""
        door = self.door
        door.check_open()
        producer.check_not_fenced()
        await self.quota.before_send()
        door.check_not_terminated()
        batch, n = req.payload, req.num_messages
        lowest, highest = req.sequence_id, req.highest_sequence_id
        if not batch or n == 0:
            raise BadRequest("send: empty batch (num_messages must be at least 1)")
        if n > self.max_batch_messages:
            raise BadRequest(f"send: batch of {n} messages exceeds the limit of {self.max_batch_messages}")
        if problem := batch_size_problem(len(batch), self.max_message_size):
            raise MessageTooBig(f"send: {problem} on {door.name.full}")
        if highest < lowest:
            raise BadRequest("send: highest_sequence_id is below sequence_id")
        try:
            shape = checked_batch(batch, n, lowest, highest)
        except BatchProblem as exc:
            raise BadRequest(f"send to {door.name.full}: {exc}; nothing was stored") from None
        if req.deliver_at:
            if problem := door.delayed_delivery.delay_problem(req.deliver_at, int(time.time() * 1000)):
                raise (BadRequest if req.deliver_at < 0 else NotAllowedError)(
                    f"send to {door.name.full}: {problem}; nothing was stored")
        check = producer.payload_check
        if check is not None and (problem := schema_problem(batch, check)):
            raise IncompatibleSchema(f"send to {door.name.full}: {problem}; nothing was stored")
        return shape

    async def admit(self, producer: Sender, req: Batch) -> Append | Sent:
        """Validate and deduplicate one batch: a queue item, or the duplicate's answer."""
        shape = await self.check(producer, req)
        door = self.door
        batch, n = req.payload, req.num_messages
        lowest, highest = req.sequence_id, req.highest_sequence_id
        txn = req.txn
        actor = await self.txnbuf.check_send(txn) if txn is not None else None
        name = producer.name
        if self.dedup.enabled and shape.judged:
            waited = False
            while True:
                door.check_open()
                last = await self.dedup.last_persisted(name)
                verdict = judge(last, lowest, highest)
                if verdict is Verdict.DUPLICATE:
                    metrics.DUPLICATES.inc(n)
                    return Sent(duplicate=True, last_sequence_id=last, partition=door.partition_index)
                pushed = self.dedup.last_pushed(name)
                if not waited and pushed > last and lowest <= pushed:
                    # Overlaps a batch still being committed: judge again once it is.
                    # Once (a batch that failed stays above ``last``), and never when
                    # nothing is in flight: ``idle()`` returns at once then, and looping
                    # on it would hold the event loop forever.
                    waited = True
                    await self._writer_idle()
                    continue
                if verdict is Verdict.PARTIAL:
                    if shape.indivisible:
                        # A Pulsar entry stored as sent cannot be split: judged by its
                        # first sequence id, as Pulsar's broker judges every entry.
                        metrics.DUPLICATES.inc(n)
                        return Sent(duplicate=True, last_sequence_id=last, partition=door.partition_index)
                    batch, n, lowest, highest = drop_persisted(batch, last)
                break
            self.dedup.admitted(name, highest)
        if txn is None:
            return Append(producer, name, lowest, highest, n, batch, judged=shape.judged, deliver_at=req.deliver_at)
        assert actor is not None
        return TxnAppend(producer, name, lowest, highest, n, batch, txn, actor, judged=shape.judged)
