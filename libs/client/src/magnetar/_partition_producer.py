"""One partition's producer: creation (access modes, topic epochs) and the ordered send
pipeline with retries.

Order: one request is in flight per partition.  With deduplication a later batch
stored before an earlier one's retry would make that retry look like a duplicate, and
HTTP requests on different connections carry no order (Pulsar gets it from one TCP
connection).  Throughput comes from ``/v1/producers/send-batches`` instead: while a
request is in flight the next batches fill up, and the next request carries every
batch that is ready, which the broker admits in order.

Retries resend the same bytes with the same sequence ids, so a batch whose answer was
lost is stored once; an answer with ``duplicate = true`` is success.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from magnetar._batch import Batch, Batcher
from magnetar._chunks import chunk_metadata, cut
from magnetar._retry import RETRYABLE, SESSION_LOST, TRANSIENT, Backoff, deadline_after
from magnetar._types import MessageId, ProducerAccessMode, Result
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ConnectError,
    MagnetarError,
    ProducerFenced,
    SessionNotFound,
    Timeout,
    error_for_code,
)

log = logging.getLogger("magnetar.producer")

MAX_BATCHES_PER_REQUEST = 64
WAIT_FOR_EXCLUSIVE_POLL_MS = 5000  # one long poll of a queued WaitForExclusive producer


class PartitionProducer(Batcher):
    """The producer of one partition (or of a non-partitioned topic)."""
    def __init__(self, producer, topic: str, partition: int, options: dict) -> None:
        super().__init__(options["max_messages"], options["max_bytes"], options["batching"])
        self.producer = producer
        self.core = producer.core
        self.topic = topic
        self.partition = partition
        self.options = options
        self.url = ""
        self.session_id = ""
        self.producer_id = 0
        # Ours across retries and reconnects: tells the broker a retried create of this
        # producer from another producer that takes the same name.
        self.client_producer_id = next(self.core.producer_ids)
        self.name: str = options["producer_name"] or ""
        self.topic_epoch: int | None = None
        self.last_seq = -1
        self.max_message_size = 5 * 1024 * 1024
        self.fenced: MagnetarError | None = None
        self.sealed_count = 0  # read by the router: round robin moves on per batch
        self.ready: deque[Batch] = deque()
        self.sender: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        self._send_soon = False
        self.idle = asyncio.Event()
        self.idle.set()
        # One-request transactions holding kept batches of this partition (they spill
        # when it closes), and commits waiting for the batches before theirs to settle.
        self.keepers: set = set()
        self._settle_waiters: list[tuple[Batch, asyncio.Future]] = []

    # ---------------------------------------------------------------- creation

    async def connect(self, first: bool = False, deadline: float | None = None) -> None:
        """Create (or re-create) the producer on the partition's owner."""
        # Never present an id from an earlier broker (ids are random per broker, but an
        # old one must not reach the new owner): cleared until the new one is known.
        self.producer_id = 0
        mode = self.options["access_mode"]
        waits = mode == ProducerAccessMode.WaitForExclusive
        # A queued WaitForExclusive producer waits as long as it takes (PIP-68).
        if waits:
            deadline = float("inf")
        elif deadline is None:
            deadline = deadline_after(self.core.operation_timeout_s)
        backoff = Backoff(deadline)
        while True:
            try:
                reply = await self._create(mode, waits)
                if reply.waiting:  # still queued: keep our place under the same name
                    self.name = reply.producer_name
                    backoff.reset()
                    continue
                break
            except SESSION_LOST as exc:
                self.core.drop_session(self.url, self.session_id)
                await backoff.wait(f"producer on {self.topic}", exc)
            except TRANSIENT as exc:
                await backoff.wait(f"producer on {self.topic}", exc)
        self.producer_id = reply.producer_id
        self.name = reply.producer_name
        self.max_message_size = reply.max_message_size or self.max_message_size
        # A batch must fit the broker's limit too.
        self.max_bytes = min(self.max_bytes, self.max_message_size)
        if reply.HasField("topic_epoch"):
            self.topic_epoch = reply.topic_epoch
        # The version the broker registered (or found) for the producer's schema; a
        # reconnect may find another if the schema was deleted and registered again.
        self.schema_version = reply.schema_version if reply.HasField("schema_version") else None
        if first:
            initial = self.options["initial_sequence_id"]
            if initial is None:
                self.last_seq = reply.last_sequence_id
            else:
                self.last_seq = initial
            self.next_seq = self.last_seq + 1

    async def _create(self, mode: ProducerAccessMode, waits: bool) -> pb.CreateProducerResponse:
        self.url = await self.core.lookup(self.topic)
        self.session_id = await self.core.session(self.url)
        req = pb.CreateProducerRequest(
            session_id=self.session_id, topic=self.topic, producer_name=self.name,
            access_mode=int(mode), user_provided_name=bool(self.options["producer_name"]),
            wait_ms=WAIT_FOR_EXCLUSIVE_POLL_MS if waits else 0,
            client_producer_id=self.client_producer_id)
        if self.topic_epoch is not None:  # keeps exclusivity across reconnects
            req.topic_epoch = self.topic_epoch
        schema = self.producer.schema
        if schema is not None:
            req.schema.CopyFrom(schema._wire())
        timeout = self.core.operation_timeout_s
        if waits:
            timeout += WAIT_FOR_EXCLUSIVE_POLL_MS / 1000
        return await self.core.call(self.url, "/v1/producers/create", req,
                                    pb.CreateProducerResponse, timeout=timeout)

    # ---------------------------------------------------------------- batching hooks

    def _opened(self, batch: Batch) -> None:
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.options["delay_s"],
                                                               self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.sender is None:
            self.seal_all()
        # Else keep filling: the sender seals what accumulated when its request returns,
        # so a busy partition sends fewer, fuller batches instead of many small ones.

    def send_soon(self) -> None:
        """For ``send()``, whose caller waits: what is open goes at the end of this
        event-loop turn, not after the publish delay, so a lone send is not held back
        while the many sends of one turn (a gather) still share a batch.  With a request
        in flight nothing changes: the sender seals what accumulated when it returns.
        (pulsar-client's send() flushes at once; a thread makes one send per turn.)"""
        if not self._send_soon:
            self._send_soon = True
            asyncio.get_running_loop().call_soon(self._end_of_turn)

    def _end_of_turn(self) -> None:
        self._send_soon = False
        if self.sender is None:
            self.seal_all()

    def add_chunked(self, payload: bytes, callback, fields: dict | None, seq: int | None, txn) -> None:
        """A message over the broker's limit, in chunks (_chunks.py), each its own batch
        in order after what is open; ``callback`` runs once, with the last chunk's id,
        or with the first failure of any chunk."""
        if seq is None:
            seq = self.next_seq
        self.next_seq = max(self.next_seq, seq + 1)
        open_batch = self.current if txn is None else self.txn_batches.get(txn)
        if open_batch is not None:
            self.seal(open_batch)
        metadata = chunk_metadata(self.name, seq, int(time.time() * 1000), len(payload), fields)
        if self.schema_version is not None:   # Pulsar's 8 bytes, read from the chunks' metadata
            metadata.schema_version = self.schema_version.to_bytes(8, "big", signed=True)
        pieces = cut(payload, metadata, self.max_message_size)
        outcome = ChunkedSend(callback)
        count = len(pieces) // 2
        for i in range(count):
            batch = Batch(txn, seq, time.monotonic())
            batch.payloads.append(pieces[2 * i + 1])
            batch.seqs.append(seq)
            batch.callbacks.append(outcome if i == count - 1 else outcome.part)
            batch.fields = {0: {**(fields or {}), "pulsar_metadata": pieces[2 * i],
                                "publish_time": metadata.publish_time}}
            batch.size = len(pieces[2 * i + 1])
            batch.highest = seq
            batch.chunk_part = i < count - 1
            batch.deliver_at = (fields or {}).get("deliver_at_time", 0)  # every chunk waits for it
            batch.data = batch.encode()
            self._sealed(batch)

    def _sealed(self, batch: Batch) -> None:
        self.sealed_count += 1
        if batch.txn is not None and batch.txn.keeping:
            self._keep(batch)
            if batch.deliver_at:
                # A one-request commit carries no delivery time: the transaction goes
                # the classic way, where the broker indexes its delayed messages.
                batch.txn.spill()
            return
        self.ready.append(batch)
        if self.sender is None:
            self.idle.clear()
            self.sender = asyncio.get_running_loop().create_task(self._send_all())

    # ---------------------------------------------------------------- one-request transactions

    def _keep(self, batch: Batch) -> None:
        """A one-request transaction keeps the batch, to send it with its commit: its
        sends are answered now (their positions come with the commit, as any
        transactional send's), its slots given back."""
        batch.kept = True
        batch.txn.keep(self, batch)
        self.keepers.add(batch.txn)
        n = len(batch.callbacks)
        partition = self.partition
        ok = Result.Ok
        for i, callback in enumerate(batch.callbacks):
            try:
                callback(ok, MessageId(partition, -1, i, n))
            except Exception:  # a user's callback must not break the pipeline
                log.exception("send callback failed")
        batch.callbacks = []
        batch.txn.ops_done(n)
        self.producer.slots.release(n)

    def send_spilled(self, batch: Batch) -> None:
        """A kept batch of a transaction that went the classic way: sent through the
        pipeline after everything sealed before it, with sequence ids that follow them
        (those it had were given before: sent now, they could look like duplicates)."""
        n = len(batch.payloads)
        batch.renumber(self.next_seq)
        self.next_seq += n
        batch.txn.ops_started(n)
        self.ready.append(batch)
        if self.sender is None:
            self.idle.clear()
            self.sender = asyncio.get_running_loop().create_task(self._send_all())

    async def settled_before(self) -> None:
        """Wait until every batch sealed so far (ready or in flight) has its answer: a
        one-request commit stores the sequence ids of its batches, which must not pass
        a batch of this producer still on its way (it would be judged a duplicate)."""
        self.seal_all()
        if not self.ready:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._settle_waiters.append((self.ready[-1], waiter))
        await waiter

    def _settled(self, batch: Batch) -> None:
        if self._settle_waiters:
            for waited, waiter in [w for w in self._settle_waiters if w[0] is batch]:
                self._settle_waiters.remove((waited, waiter))
                if not waiter.done():
                    waiter.set_result(None)

    # ---------------------------------------------------------------- sending

    async def _send_all(self) -> None:
        try:
            while self.ready:
                group = self._next_group()
                try:
                    outcomes = await self._send_group(group)
                except Exception as exc:  # every message of the group learns why
                    outcomes = [exc] * len(group)
                for batch, outcome in zip(group, outcomes):
                    self.ready.popleft()
                    if isinstance(outcome, BaseException):
                        self._settle_failed(batch, outcome)
                    else:
                        self._settle_ok(batch, outcome)
                    self._settled(batch)
                if not self.ready:
                    self.seal_all()  # what filled up while the request was in flight
        finally:
            self.sender = None
            if not self.ready:
                self.idle.set()

    def _next_group(self) -> list[Batch]:
        """The ready batches the next request carries: up to MAX_BATCHES_PER_REQUEST and
        the broker's max message size in bytes (always one), so a request stays under
        the services' body limit (MAGNETAR_MAX_BODY_BYTES: that size + 1 MiB)."""
        group = [self.ready[0]]
        size = len(group[0].data)
        for i in range(1, min(len(self.ready), MAX_BATCHES_PER_REQUEST)):
            size += len(self.ready[i].data)
            if size > self.max_message_size:
                break
            group.append(self.ready[i])
        return group

    async def _send_group(self, group: list[Batch]) -> list:
        """Send batches in one request, in order; from the first retryable failure on,
        retry them (after a reconnect) until the earliest batch's send deadline."""
        outcomes: dict[int, object] = {}
        pending = []
        # A transactional batch needs no registration first: the broker registers the
        # partition with the transaction on its first send there (docs/transactions.md).
        for batch in group:
            if self.fenced is not None:
                outcomes[id(batch)] = self.fenced
            else:
                pending.append(batch)
        timeout_s = self.options["send_timeout_s"]
        deadline = min(b.created for b in group) + timeout_s if timeout_s else float("inf")
        backoff = Backoff(deadline)
        while pending:
            try:
                pending, cause = await self._attempt(pending, outcomes, deadline)
            except MagnetarError as exc:  # the whole request was refused
                self._note_fenced(exc)
                outcomes.update((id(b), exc) for b in pending)
                break
            if not pending:
                break
            if isinstance(cause, SessionNotFound):
                self.core.drop_session(self.url, self.session_id)
            try:
                await backoff.wait(f"send to {self.topic}", cause)
                await self.connect(deadline=deadline)
            except Timeout as exc:
                outcomes.update((id(b), exc) for b in pending)
                break
            except RETRYABLE:
                continue  # the next round reconnects again
            except MagnetarError as exc:  # e.g. ProducerBusy, ProducerFenced on re-creation
                self._note_fenced(exc)
                outcomes.update((id(b), exc) for b in pending)
                break
        return [outcomes[id(b)] for b in group]

    async def _attempt(self, pending: list[Batch], outcomes: dict,
                       deadline: float) -> tuple[list[Batch], MagnetarError | None]:
        """One send-batches request: records each settled batch in ``outcomes`` and
        returns the batches to retry (from the first retryable failure on) and why.
        Raises when the whole request was refused."""
        if not self.producer_id:  # the last reconnect failed: nothing to send as, yet
            return pending, ConnectError(f"producer on {self.topic} is not connected")
        request = pb.SendBatchesRequest(batches=[self._request(b) for b in pending],
                                        session_id=self.session_id)
        try:
            reply = await self.core.call(
                self.url, "/v1/producers/send-batches", request, pb.SendBatchesResponse,
                timeout=max(min(deadline - time.monotonic(), 60.0), 1.0))
        except RETRYABLE as exc:
            return pending, exc
        retry: list[Batch] = []
        cause: MagnetarError | None = None
        results = reply.results
        for i, batch in enumerate(pending):
            if retry or i >= len(results):
                retry.append(batch)
                continue
            result = results[i]
            if result.HasField("error"):
                err = error_for_code(result.error.code, result.error.message)
                if isinstance(err, RETRYABLE):
                    cause = err
                    retry.append(batch)
                else:
                    self._note_fenced(err)
                    outcomes[id(batch)] = err
            else:
                outcomes[id(batch)] = result.response
        if retry and cause is None:
            cause = MagnetarError("the broker answered fewer results than batches")
        return retry, cause

    def _note_fenced(self, exc: MagnetarError) -> None:
        if isinstance(exc, ProducerFenced):
            self.fenced = exc  # every later send fails the same way, without a request

    def _request(self, batch: Batch) -> pb.SendRequest:
        req = pb.SendRequest(producer_id=self.producer_id, session_id=self.session_id, batch=batch.data,
                             num_messages=len(batch.payloads), sequence_id=batch.lowest,
                             highest_sequence_id=batch.highest)
        if batch.txn is not None:
            req.txn.CopyFrom(batch.txn.txn_id.to_wire())
        if batch.deliver_at:
            req.deliver_at_time = batch.deliver_at
        return req

    def _settle_ok(self, batch: Batch, reply: pb.SendResponse) -> None:
        if batch.highest > self.last_seq:
            self.last_seq = batch.highest
        if batch.kept:  # answered when kept; its transaction waited for it
            batch.txn.ops_done(len(batch.payloads))
            return
        callbacks = batch.callbacks
        n = len(callbacks)
        # A dropped duplicate has no new position; a transaction's messages get theirs
        # only when it commits.
        entry = -1 if (reply.duplicate or batch.txn is not None) else reply.entry_id
        partition = self.partition
        ok = Result.Ok
        for i, callback in enumerate(callbacks):
            try:
                callback(ok, MessageId(partition, entry, i, n))
            except Exception:  # a user's callback must not break the pipeline
                log.exception("send callback failed")
        self._released(batch, 0 if batch.chunk_part else n)

    def _settle_failed(self, batch: Batch, error: BaseException) -> None:
        if batch.txn is not None:
            batch.txn.mark_failed(error)
        if batch.kept:  # answered when kept: its commit raises TransactionHasOperationFailed
            batch.txn.ops_done(len(batch.payloads))
            return
        for callback in batch.callbacks:
            try:
                callback(error, None)
            except Exception:
                log.exception("send callback failed")
        self._released(batch, 0 if batch.chunk_part else len(batch.callbacks))

    def _released(self, batch: Batch, n: int) -> None:
        if batch.txn is not None and n:
            batch.txn.ops_done(n)
        if n:
            self.producer.slots.release(n)

    async def flush(self) -> None:
        """Seal the open batches and wait until everything sent was answered."""
        self.seal_all()
        await self.idle.wait()

    async def close(self) -> None:
        """Flush, then close the producer on the broker."""
        for txn in list(self.keepers):
            txn.spill()  # its kept batches need this producer: they go now, the classic way
        await self.flush()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.producer_id:
            try:
                await self.core.call(self.url, "/v1/producers/close",
                                     pb.CloseProducerRequest(producer_id=self.producer_id,
                                                             session_id=self.session_id),
                                     pb.CloseProducerResponse, timeout=5)
            except MagnetarError:
                pass  # it goes with its session anyway


class ChunkedSend:
    """The user's callback of a chunked message: called once, when the last chunk is
    answered, with the first error any chunk met (chunks settle in order)."""

    __slots__ = ("callback", "error")

    def __init__(self, callback) -> None:
        self.callback = callback
        self.error: BaseException | None = None

    def part(self, result, msg_id: MessageId | None) -> None:
        if result is not Result.Ok and self.error is None:
            self.error = result

    def __call__(self, result, msg_id: MessageId | None) -> None:
        if self.error is not None and result is Result.Ok:
            result, msg_id = self.error, None
        self.callback(result, msg_id)
