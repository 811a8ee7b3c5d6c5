"""magnetar_protocol.coalesce: calls go alone while a slot is free and as one /v1/batch
request when they pile up; each caller gets its own answer or its own error."""

import asyncio

import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.coalesce import BATCH_PATH, Coalescer
from magnetar_protocol.errors import ConnectError, TransactionConflict, error_for_code, to_wire


def decode(status: int, body: bytes, where: str) -> Exception:
    err = pb.Error.FromString(body)
    return error_for_code(err.code, err.message)


class Service:
    """A stand-in transport: answers a TxnId call with its least bits + 1 (a least bits of
    13 is refused), a batch call by answering each of its calls; each request waits for
    ``release`` so tests decide when requests finish."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []  # (path, number of calls)
        self.release = asyncio.Event()

    def answer(self, txn: pb.TxnId) -> tuple[int, bytes]:
        if txn.least_bits == 13:
            err = TransactionConflict("thirteen is taken")
            return err.http_status, to_wire(err).SerializeToString()
        return 200, pb.TxnId(least_bits=txn.least_bits + 1).SerializeToString()

    async def send(self, url, path, request, response_type, timeout):
        self.requests.append((path, len(request.calls) if path == BATCH_PATH else 1))
        await self.release.wait()
        if path == BATCH_PATH:
            results = [self.answer(pb.TxnId.FromString(c.body)) for c in request.calls]
            return pb.BatchResponse(results=[pb.BatchResult(status=s, body=b) for s, b in results])
        status, body = self.answer(request)
        if status != 200:
            raise decode(status, body, path)
        return response_type.FromString(body)


async def test_an_idle_lane_sends_each_call_alone():
    service = Service()
    service.release.set()
    coalescer = Coalescer(service.send, decode, max_in_flight=1)
    for i in range(3):
        reply = await coalescer.call("http://c", "/v1/txn/new", pb.TxnId(least_bits=i), pb.TxnId)
        assert reply.least_bits == i + 1
    assert service.requests == [("/v1/txn/new", 1)] * 3
    assert coalescer.batches_sent == 0


async def test_calls_that_pile_up_share_one_batch_with_their_own_answers():
    service = Service()
    coalescer = Coalescer(service.send, decode, max_in_flight=1)
    calls = [asyncio.create_task(coalescer.call("http://c", "/v1/txn/end", pb.TxnId(least_bits=i),
                                                pb.TxnId)) for i in (10, 11, 12, 13, 14)]
    await asyncio.sleep(0)  # every task queued behind the first, which is in flight
    service.release.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert service.requests == [("/v1/txn/end", 1), (BATCH_PATH, 4)]
    assert [r.least_bits for r in results if not isinstance(r, Exception)] == [11, 12, 13, 15]
    assert isinstance(results[3], TransactionConflict)  # that caller alone failed
    assert str(results[3]) == "thirteen is taken"


async def test_lanes_are_per_url_and_path():
    service = Service()
    coalescer = Coalescer(service.send, decode, max_in_flight=1)
    calls = [asyncio.create_task(coalescer.call(url, path, pb.TxnId(least_bits=1), pb.TxnId))
             for url, path in [("http://a", "/x"), ("http://b", "/x"), ("http://a", "/y")]]
    await asyncio.sleep(0)
    assert len(service.requests) == 3  # none waited for another
    service.release.set()
    await asyncio.gather(*calls)


async def test_a_batch_that_gets_no_answer_fails_every_call_in_it():
    service = Service()

    async def send(url, path, request, response_type, timeout):
        if path == BATCH_PATH:
            raise ConnectError("no answer")
        return await service.send(url, path, request, response_type, timeout)

    coalescer = Coalescer(send, decode, max_in_flight=1)
    first = asyncio.create_task(coalescer.call("http://c", "/p", pb.TxnId(least_bits=1), pb.TxnId))
    queued = [asyncio.create_task(coalescer.call("http://c", "/p", pb.TxnId(least_bits=i), pb.TxnId))
              for i in (2, 3)]
    await asyncio.sleep(0)
    service.release.set()
    assert (await first).least_bits == 2
    for task in queued:
        with pytest.raises(ConnectError):
            await task


async def test_a_caller_that_gave_up_is_left_out_of_the_batch():
    service = Service()
    coalescer = Coalescer(service.send, decode, max_in_flight=1)
    first = asyncio.create_task(coalescer.call("http://c", "/p", pb.TxnId(least_bits=1), pb.TxnId))
    gone = asyncio.create_task(coalescer.call("http://c", "/p", pb.TxnId(least_bits=2), pb.TxnId))
    kept = [asyncio.create_task(coalescer.call("http://c", "/p", pb.TxnId(least_bits=i), pb.TxnId))
            for i in (3, 4)]
    await asyncio.sleep(0)
    gone.cancel()
    service.release.set()
    await first
    assert [(await t).least_bits for t in kept] == [4, 5]
    assert service.requests == [("/p", 1), (BATCH_PATH, 2)]
