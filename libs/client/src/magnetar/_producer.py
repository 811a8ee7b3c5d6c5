"""Producers: batching, sequence ids, ordered sends with retries, access modes.

One batch per partition is in flight at a time: with deduplication, a later batch
stored before an earlier one's retry would make the retry look like a duplicate, so
order must hold (Pulsar gets it from one TCP connection; HTTP gives no such order).
A retry resends the same bytes with the same sequence ids, so it is stored once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    MagnetarError,
    error_for_code,
    MessageTooBig,
    ProducerNotFound,
    SessionNotFound,
    Timeout,
)

from magnetar._core import RETRYABLE, Core, backoff_until
from magnetar._types import MessageId, ProducerAccessMode, Result


MAX_BATCHES_PER_REQUEST = 64


async def _register(batch: "_Batch") -> Exception | None:
    """Register the partition with the batch's transaction; the failure, if any."""
    try:
        await batch.txn.register_partition(batch.producer_topic)
        return None
    except MagnetarError as exc:
        return exc


class _Batch:
    __slots__ = ("messages", "waiters", "size", "lowest", "highest", "txn", "created", "payload",
                 "producer_topic")

    def __init__(self, txn, created: float):
        self.messages: list[pb.SingleMessage] = []
        self.waiters: list = []  # a future or a callback per message
        self.size = 0
        self.lowest = -1
        self.highest = -1
        self.txn = txn
        self.created = created
        self.payload = b""
        self.producer_topic = ""


class PartitionProducer:
    def __init__(self, producer, topic: str, partition: int):
        self.producer = producer  # the Producer of _partitioned.py
        self.core: Core = producer.core
        self.topic = topic
        self.partition = partition
        self.url = ""
        self.session_id = ""
        self.producer_id = 0
        self.name = producer.requested_name
        self.topic_epoch: int | None = None
        self.next_seq = 0
        self.last_seq = -1
        self.max_message_size = 5 * 1024 * 1024
        self.current: _Batch | None = None
        self.txn_batches: dict = {}
        self.ready: deque[_Batch] = deque()
        self.sender: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.idle = asyncio.Event()
        self.idle.set()
        self.fenced: MagnetarError | None = None

    # ---------------------------------------------------------------- connection

    async def connect(self, first: bool = False) -> None:
        # Never reuse an id from an earlier broker: clear it until the new one is known.
        self.producer_id = 0
        opts = self.producer.options
        wait_forever = opts["access_mode"] == ProducerAccessMode.WaitForExclusive

        def request(session_id: str) -> pb.CreateProducerRequest:
            req = pb.CreateProducerRequest(
                session_id=session_id, topic=self.topic, producer_name=self.name or "",
                access_mode=int(opts["access_mode"]), user_provided_name=bool(self.name),
                wait_ms=5000 if wait_forever else 0)
            if self.topic_epoch is not None:
                req.topic_epoch = self.topic_epoch
            return req

        while True:
            deadline = float("inf") if wait_forever else time.monotonic() + self.core.operation_timeout_s
            self.url, self.session_id, reply = await self.core.attach(
                self.topic, "/v1/producers/create", request, pb.CreateProducerResponse,
                f"producer on {self.topic}", deadline, timeout=self.core.operation_timeout_s + 6)
            if not reply.waiting:
                break
            self.name = reply.producer_name  # WaitForExclusive: keep our place in the queue
        self.producer_id = reply.producer_id
        self.name = reply.producer_name
        self.max_message_size = reply.max_message_size or self.max_message_size
        if reply.HasField("topic_epoch"):
            self.topic_epoch = reply.topic_epoch
        if first:
            initial = opts["initial_sequence_id"]
            self.next_seq = initial + 1 if initial is not None else reply.last_sequence_id + 1
            self.last_seq = reply.last_sequence_id if initial is None else initial

    # ---------------------------------------------------------------- batching

    def add(self, msg: pb.SingleMessage, waiter, txn=None, explicit_seq: bool = False) -> None:
        """Queue one message (non-blocking); ``waiter`` learns its MessageId."""
        if self.fenced is not None:
            raise self.fenced
        size = len(msg.payload)
        if size > self.max_message_size:
            raise MessageTooBig(f"message of {size} bytes exceeds the maximum of {self.max_message_size} bytes")
        if explicit_seq:
            seq = msg.sequence_id
        else:
            seq = self.next_seq
            msg.sequence_id = seq
        self.next_seq = max(self.next_seq, seq + 1)
        opts = self.producer.options
        batch = self.current if txn is None else self.txn_batches.get(txn)
        if batch is not None and (seq <= batch.highest or batch.size + size > opts["max_bytes"]):
            self._seal(batch)
            batch = None
        if batch is None:
            batch = _Batch(txn, time.monotonic())
            batch.producer_topic = self.topic
            batch.lowest = seq
            if txn is None:
                self.current = batch
            else:
                self.txn_batches[txn] = batch
        batch.messages.append(msg)
        batch.waiters.append(waiter)
        batch.size += size
        batch.highest = seq
        if not opts["batching"] or len(batch.messages) >= opts["max_messages"]:
            self._seal(batch)
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(opts["delay_s"], self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.sender is None:
            self.seal_all()
        # Else keep filling: the sender seals what accumulated when its send returns,
        # so a busy partition sends fewer, fuller batches instead of a queue of tiny ones.

    def _seal_pending(self) -> None:
        """Seal what accumulated while a send was in flight (called by the sender)."""
        if self.current is not None:
            self._seal(self.current, start=False)
        for batch in list(self.txn_batches.values()):
            self._seal(batch, start=False)

    def seal_all(self) -> None:
        if self.current is not None:
            self._seal(self.current)
        for batch in list(self.txn_batches.values()):
            self._seal(batch)

    def _seal(self, batch: _Batch, start: bool = True) -> None:
        if batch is self.current:
            self.current = None
        elif self.txn_batches.get(batch.txn) is batch:
            del self.txn_batches[batch.txn]
        batch.payload = pb.MessageBatch(messages=batch.messages).SerializeToString()
        self.ready.append(batch)
        if start and self.sender is None:
            self.idle.clear()
            self.sender = asyncio.create_task(self._send_all())

    # ---------------------------------------------------------------- sending

    async def _send_all(self) -> None:
        try:
            while self.ready:
                group = [self.ready[i] for i in range(min(len(self.ready), MAX_BATCHES_PER_REQUEST))]
                try:
                    outcomes = await self._send_group(group)
                except Exception as exc:  # every message of the group learns why
                    outcomes = [exc] * len(group)
                for batch, outcome in zip(group, outcomes):
                    if isinstance(outcome, Exception):
                        self._settle(batch, error=outcome)
                    else:
                        self._settle(batch, reply=outcome)
                    self.ready.popleft()
                if not self.ready:
                    self._seal_pending()
        finally:
            self.sender = None
            if not self.ready:
                self.idle.set()

    async def _send_group(self, group: list[_Batch]) -> list:
        """Send batches in one request, in order; retry from the first retryable failure
        on (the broker never stores a later batch before an earlier one)."""
        outcomes: dict[int, object] = {}
        pending = []
        # Every transaction in the group registers this partition at once, not in turn.
        transactional = [b for b in group if b.txn is not None and self.fenced is None]
        failures = dict(zip(map(id, transactional),
                            await asyncio.gather(*(_register(b) for b in transactional))))
        for batch in group:
            if self.fenced is not None:
                outcomes[id(batch)] = self.fenced
            elif failures.get(id(batch)) is not None:
                outcomes[id(batch)] = failures[id(batch)]
            else:
                pending.append(batch)
        deadline = min(b.created for b in group) + self.producer.options["send_timeout_s"]
        attempt = 0
        while pending:
            req = pb.SendBatchesRequest(batches=[self._request(b) for b in pending])
            cause: Exception | None = None
            try:
                reply = await self.core.call(self.url, "/v1/producers/send-batches", req, pb.SendBatchesResponse,
                                             timeout=max(deadline - time.monotonic(), 1.0))
            except (SessionNotFound, ProducerNotFound) as exc:
                self.core.drop_session(self.url, self.session_id)
                cause = exc
            except RETRYABLE as exc:
                cause = exc
            except MagnetarError as exc:
                for b in pending:
                    outcomes[id(b)] = exc
                break
            else:
                retry = []
                for b, result in zip(pending, reply.results):
                    if retry:
                        retry.append(b)
                    elif result.HasField("error"):
                        err = error_for_code(result.error.code, result.error.message)
                        if err.retryable:
                            cause = err
                            retry.append(b)
                        else:
                            if err.code == pb.PRODUCER_FENCED:
                                self.fenced = err
                            outcomes[id(b)] = err
                    else:
                        outcomes[id(b)] = result.response
                pending = retry
                if not pending:
                    break
                if isinstance(cause, (SessionNotFound, ProducerNotFound)):
                    self.core.drop_session(self.url, self.session_id)
            if time.monotonic() >= deadline:
                timeout = Timeout(f"send to {self.topic} timed out; last error: {cause}")
                for b in pending:
                    outcomes[id(b)] = timeout
                break
            await backoff_until(deadline, attempt, f"send to {self.topic}", cause)
            attempt += 1
            try:
                await self.connect()
            except (Timeout, *RETRYABLE):
                continue
            except MagnetarError as exc:  # e.g. fenced: another exclusive producer took over
                if exc.code == pb.PRODUCER_FENCED:
                    self.fenced = exc
                for b in pending:
                    outcomes[id(b)] = exc
                break
        return [outcomes[id(b)] for b in group]

    def _request(self, batch: _Batch) -> pb.SendRequest:
        req = pb.SendRequest(producer_id=self.producer_id, batch=batch.payload,
                             num_messages=len(batch.messages), sequence_id=batch.lowest,
                             highest_sequence_id=batch.highest)
        if batch.txn is not None:
            req.txn.CopyFrom(batch.txn.txn_id.to_wire())
        return req

    def _settle(self, batch: _Batch, reply: pb.SendResponse | None = None, error: Exception | None = None) -> None:
        n = len(batch.messages)
        if error is not None and batch.txn is not None:
            batch.txn.mark_failed(error)
        if reply is not None:
            self.last_seq = max(self.last_seq, batch.highest)
            entry = -1 if (reply.duplicate or batch.txn is not None) else reply.entry_id
        for i, waiter in enumerate(batch.waiters):
            if error is None:
                result = MessageId(self.partition, entry, i, n)
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    if error is None:
                        waiter.set_result(result)
                    else:
                        waiter.set_exception(error)
            else:
                try:
                    waiter(Result.Ok if error is None else error, None if error else result)
                except Exception:  # a user's callback must not break the pipeline
                    pass
        self.producer.released(n)

    async def flush(self) -> None:
        self.seal_all()
        await self.idle.wait()

    async def close(self) -> None:
        await self.flush()
        if self.timer:
            self.timer.cancel()
        if self.producer_id:
            try:
                await self.core.call(self.url, "/v1/producers/close",
                                     pb.CloseProducerRequest(producer_id=self.producer_id),
                                     pb.CloseProducerResponse, timeout=5)
            except MagnetarError:
                pass
