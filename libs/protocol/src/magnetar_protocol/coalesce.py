"""Coalescing calls: many protobuf calls to one service as one ``/v1/batch`` request,
but only when they pile up.

Each (service URL, path) is a lane with at most ``max_in_flight`` requests under way.
A call that finds a free slot is sent at once, alone, exactly as without this module (so
an idle client pays no extra latency).  A call that finds every slot taken waits in the
lane's queue; when a request returns, everything queued meanwhile goes out as one
``/v1/batch`` request (``BatchRequest``), whose per-call results are handed back to
their callers as if each had been its own request: the same response, or the same
exception class.  Under load the batches grow by themselves (group commit for HTTP),
which is what lets sixteen concurrent transactions cost one request per phase instead
of sixteen.

The module does no I/O of its own: ``send`` (a transport's ``call``) and
``decode_error`` come from the caller, so the client and the services share it.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError, Message

from magnetar_protocol import magnetar_pb2 as pb

BATCH_PATH = "/v1/batch"
# Requests under way per lane before calls queue for a batch.  Benchmarks set a huge
# value to measure the same code without coalescing.
DEFAULT_MAX_IN_FLIGHT = int(os.environ.get("MAGNETAR_COALESCE_MAX_IN_FLIGHT", "2"))

Send = Callable[[str, str, Message, type, "float | None"], Awaitable[Message]]
DecodeErr = Callable[[int, bytes, str], BaseException]


@dataclass
class _Queued:
    request: Message
    response_type: type
    timeout: float | None
    future: asyncio.Future


@dataclass
class _Lane:
    url: str
    path: str
    in_flight: int = 0
    queue: deque = field(default_factory=deque)


class Coalescer:
    def __init__(self, send: Send, decode_error: DecodeErr, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_batch: int = 256) -> None:
        self._send = send
        self._decode_error = decode_error
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._tasks: set[asyncio.Task] = set()
        self.batches_sent = 0  # for tests and stats: requests that carried more than one call

    async def call(self, url: str, path: str, request: Message, response_type: type,
                   timeout: float | None = None) -> Message:
        lane = self._lanes.get((url, path))
        if lane is None:
            lane = self._lanes[(url, path)] = _Lane(url, path)
        if lane.in_flight < self.max_in_flight and not lane.queue:
            lane.in_flight += 1
            try:
                return await self._send(url, path, request, response_type, timeout)
            finally:
                lane.in_flight -= 1
                self._drain(lane)
        future = asyncio.get_running_loop().create_future()
        lane.queue.append(_Queued(request, response_type, timeout, future))
        return await future

    def _drain(self, lane: _Lane) -> None:
        while lane.queue and lane.in_flight < self.max_in_flight:
            batch = []
            while lane.queue and len(batch) < self.max_batch:
                item = lane.queue.popleft()
                if not item.future.done():  # its caller gave up (cancelled)
                    batch.append(item)
            if not batch:
                return
            lane.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send_queued(lane, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_queued(self, lane: _Lane, batch: list[_Queued]) -> None:
        try:
            if len(batch) == 1:
                item = batch[0]
                try:
                    reply = await self._send(lane.url, lane.path, item.request,
                                             item.response_type, item.timeout)
                except BaseException as exc:  # handed to the caller, who decides
                    _settle(item.future, exc=exc)
                else:
                    _settle(item.future, result=reply)
                return
            await self._send_batch(lane, batch)
        finally:
            lane.in_flight -= 1
            self._drain(lane)

    async def _send_batch(self, lane: _Lane, batch: list[_Queued]) -> None:
        timeouts = [item.timeout for item in batch]
        timeout = None if None in timeouts else max(timeouts)
        request = pb.BatchRequest(calls=[
            pb.BatchCall(path=lane.path, body=item.request.SerializeToString()) for item in batch])
        self.batches_sent += 1
        try:
            reply = await self._send(lane.url, BATCH_PATH, request, pb.BatchResponse, timeout)
        except BaseException as exc:
            for item in batch:
                _settle(item.future, exc=exc)
            return
        where = lane.url.rstrip("/") + lane.path
        if len(reply.results) != len(batch):
            exc = self._decode_error(500, b"", f"{where} (batched): {len(reply.results)} "
                                     f"results for {len(batch)} calls")
            for item in batch:
                _settle(item.future, exc=exc)
            return
        for item, result in zip(batch, reply.results):
            if result.status == 200:
                try:
                    _settle(item.future, result=item.response_type.FromString(result.body))
                except DecodeError as exc:
                    _settle(item.future, exc=self._decode_error(
                        500, str(exc).encode(), f"{where} (batched): unreadable answer"))
            else:
                _settle(item.future, exc=self._decode_error(result.status, result.body, where))


def _settle(future: asyncio.Future, result=None, exc: BaseException | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
