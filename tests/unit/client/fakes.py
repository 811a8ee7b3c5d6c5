"""A scripted stand-in for magnetar._transport.Transport, for unit tests only.

It knows no broker semantics: each path answers whatever the test scripts (a default
answer keeps discovery and sessions out of the way), and every call is recorded so a
test can assert what the client sent.  Integration and end-to-end tests use a real
broker instead.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections import defaultdict

from magnetar_protocol import magnetar_pb2 as pb
from tests.waiting import async_wait_until

BROKER = "http://broker-a:8080"
TOPIC = "persistent://public/default/t"


class FakeTransport:
    def __init__(self, partitions: int = 0, last_sequence_id: int = -1,
                 max_message_size: int = 5 * 1024 * 1024) -> None:
        self.calls: list[tuple[str, str, object]] = []
        self.partitions = partitions
        self.last_sequence_id = last_sequence_id
        self.max_message_size = max_message_size
        self._ids = itertools.count(1)
        self._entries: dict[str, itertools.count] = defaultdict(lambda: itertools.count(0))
        self.closed = False
        self.handlers = {
            "/v1/topics/metadata": lambda url, req: pb.PartitionMetadataResponse(
                topic=TOPIC, partitions=self.partitions),
            "/v1/topics/lookup": lambda url, req: pb.LookupResponse(topic=req.topic, broker_url=BROKER),
            "/v1/sessions/open": lambda url, req: pb.OpenSessionResponse(
                session_id=f"s{next(self._ids)}", keepalive_interval_ms=60000,
                session_timeout_ms=180000),
            "/v1/sessions/keepalive": lambda url, req: pb.KeepAliveResponse(),
            "/v1/sessions/close": lambda url, req: pb.CloseSessionResponse(),
            "/v1/producers/create": self._create_producer,
            "/v1/producers/send-batches": self._send_batches,
            "/v1/producers/close": lambda url, req: pb.CloseProducerResponse(),
            "/v1/consumers/subscribe": lambda url, req: pb.SubscribeResponse(consumer_id=next(self._ids)),
            "/v1/consumers/fetch": self._idle_fetch,
            "/v1/consumers/ack": lambda url, req: pb.AckResponse(),
            "/v1/consumers/redeliver": lambda url, req: pb.RedeliverResponse(),
            "/v1/consumers/seek": lambda url, req: pb.SeekResponse(),
            "/v1/consumers/close": lambda url, req: pb.CloseConsumerResponse(),
        }

    # ---------------------------------------------------------------- defaults

    def _create_producer(self, url, req):
        return pb.CreateProducerResponse(
            producer_id=next(self._ids), producer_name=req.producer_name or "broker-chosen",
            last_sequence_id=self.last_sequence_id, max_message_size=self.max_message_size)

    def _send_batches(self, url, req):
        reply = pb.SendBatchesResponse()
        for batch in req.batches:
            reply.results.add(response=pb.SendResponse(
                entry_id=next(self._entries[batch.producer_id]),
                last_sequence_id=batch.highest_sequence_id))
        return reply

    async def _idle_fetch(self, url, req):
        await asyncio.sleep(min(req.wait_ms, 50) / 1000)
        return pb.FetchResponse()

    # ---------------------------------------------------------------- the seam

    async def call(self, url, path, request, response_type, timeout=None):
        sent = type(request)()
        sent.CopyFrom(request)  # the client may reuse its request object
        self.calls.append((url, path, sent))
        result = self.handlers[path](url, request)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BaseException):
            raise result
        return result

    async def close(self) -> None:
        self.closed = True

    def sent(self, path: str) -> list:
        """The requests sent to ``path``, in order."""
        return [req for _, p, req in self.calls if p == path]


def batches(transport: FakeTransport) -> list[pb.SendRequest]:
    """Every SendRequest the client sent, flattened out of send-batches requests."""
    return [b for req in transport.sent("/v1/producers/send-batches") for b in req.batches]


def decode(send: pb.SendRequest) -> list[pb.SingleMessage]:
    return list(pb.MessageBatch.FromString(send.batch).messages)


async def wait_until(predicate, timeout: float = 5.0, what: str = "condition"):
    """tests.waiting's async form with this module's defaults (a fake answers at once)."""
    return await async_wait_until(predicate, timeout, what)
