"""A busy client's pool of open transactions (_txn_pool.py) against a scripted
coordinator: when it asks for blocks, what it hands out, what it aborts, and the timeout
it counts itself."""

import asyncio
import itertools
from collections import deque

import pytest

import magnetar
import magnetar.asyncio as aio
from magnetar import _txn_pool
from magnetar_protocol import magnetar_pb2 as pb

from .fakes import FakeTransport, wait_until

URL = "http://any-broker:8080"
COORDINATOR = "http://coordinator-0:8080"


class CoordinatorTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self._txn_ids = itertools.count(0)
        self.aborted: list[int] = []
        self.committed: list[int] = []
        self.handlers.update({
            "/v1/txn/coordinators": lambda url, req: pb.LookupCoordinatorsResponse(
                coordinators=[pb.CoordinatorInfo(coordinator_id=0, url=COORDINATOR)]),
            "/v1/txn/new": self._new,
            "/v1/txn/end": self._end,
            "/v1/batch": self._batch,
        })

    def _new(self, url, req):
        ids = [next(self._txn_ids) for _ in range(max(req.count, 1))]
        return pb.NewTxnResponse(txn=pb.TxnId(most_bits=0, least_bits=ids[0]),
                                 timeout_ms=req.timeout_ms, more_least_bits=ids[1:])

    def _end(self, url, req):
        (self.committed if req.action == pb.TXN_COMMIT else self.aborted).append(req.txn.least_bits)
        return pb.EndTxnResponse(status=pb.TXN_COMMITTED if req.action == pb.TXN_COMMIT
                                 else pb.TXN_ABORTED)

    def _batch(self, url, req):
        reply = pb.BatchResponse()
        for call in req.calls:
            request = {"/v1/txn/new": pb.NewTxnRequest, "/v1/txn/end": pb.EndTxnRequest}[call.path]
            body = self.handlers[call.path](url, request.FromString(call.body))
            reply.results.add(status=200, body=body.SerializeToString())
        return reply

    def new_requests(self) -> list[pb.NewTxnRequest]:
        requests = list(self.sent("/v1/txn/new"))
        for batch in self.sent("/v1/batch"):
            requests += [pb.NewTxnRequest.FromString(c.body) for c in batch.calls
                         if c.path == "/v1/txn/new"]
        return requests


@pytest.fixture
def transport():
    return CoordinatorTransport()


async def _busily(client, count: int) -> list:
    """``count`` transactions opened back to back, as a busy caller opens them."""
    txns = []
    for _ in range(count):
        txns.append(await client.new_transaction())
        await asyncio.sleep(0)  # a real call yields to the loop: the lease runs
    return txns


async def test_an_occasional_caller_opens_each_transaction_itself(transport):
    async with aio.Client(URL, transport=transport) as client:
        for _ in range(3):
            txn = await client.new_transaction()
            await txn.commit()
        assert [r.count for r in transport.new_requests()] == [0, 0, 0]
        assert transport.committed == [0, 1, 2]


async def test_a_busy_caller_gets_pooled_transactions_without_a_round_trip(transport):
    async with aio.Client(URL, transport=transport) as client:
        txns = await _busily(client, 40)
        pooled_requests = [r for r in transport.new_requests() if r.count > 1]
        assert pooled_requests, "no block was asked for"
        assert all(r.hold_ms == _txn_pool.HOLD_S * 1000 for r in pooled_requests)
        # Fewer requests than transactions: the rest came from the pool.
        assert len(transport.new_requests()) < 40
        assert len({t.txn_id for t in txns}) == 40
        assert sum(t.deadline is not None for t in txns) >= 20  # pooled: no round trip
        await asyncio.gather(*(t.commit() for t in txns))
    # Closing aborted what was pooled and not taken; none of it was handed out.
    handed_out = {t.txn_id.least_bits for t in txns}
    assert transport.aborted and not handed_out & set(transport.aborted)


async def test_pooled_transactions_not_taken_within_the_hold_are_aborted(transport):
    async with aio.Client(URL, transport=transport) as client:
        for _ in range(20):
            await client.new_transaction()
        pool = client.core.txn_pool
        await wait_until(lambda: pool.ready, what="a block in the pool")
        pooled = [entry[0].least_bits for entry in pool.ready]
        # As if the hold had passed since they were asked for: stale now.
        pool.ready = deque((txn, url, asked - _txn_pool.HOLD_S - 1) for txn, url, asked in pool.ready)
        late = await client.new_transaction()
        assert late.txn_id.least_bits not in pooled
        await wait_until(lambda: set(pooled) <= set(transport.aborted), what="stale ones aborted")


async def test_a_pooled_transaction_counts_its_timeout_itself(transport):
    async with aio.Client(URL, transport=transport) as client:
        for _ in range(20):
            await client.new_transaction(timeout_ms=60000)
        await wait_until(lambda: client.core.txn_pool.ready, what="a block in the pool")
        txn = await client.new_transaction(timeout_ms=60000)
        assert txn.deadline is not None
        txn.deadline = 0  # as if its 60 s had passed
        producer = await client.create_producer("t")
        with pytest.raises(magnetar.InvalidTxnStatusError, match="timed out"):
            await producer.send(b"late", txn=txn)
        with pytest.raises(magnetar.InvalidTxnStatusError, match="timed out"):
            await txn.commit()
        assert txn.state is magnetar.TransactionState.ABORTED
        assert txn.txn_id.least_bits in transport.aborted
        assert txn.txn_id.least_bits not in transport.committed


async def test_another_timeout_does_not_take_from_the_pool(transport):
    async with aio.Client(URL, transport=transport) as client:
        for _ in range(20):
            await client.new_transaction(timeout_ms=60000)
        await wait_until(lambda: client.core.txn_pool.ready, what="a block in the pool")
        pooled = [entry[0].least_bits for entry in client.core.txn_pool.ready]
        other = await client.new_transaction(timeout_ms=5000)
        assert other.txn_id.least_bits not in pooled and other.deadline is None
        await wait_until(lambda: set(pooled) <= set(transport.aborted), what="old pool aborted")


async def test_a_coordinator_that_ignores_count_gets_no_more_block_requests(transport):
    """An older coordinator answers a block request with one transaction, whose deadline
    lacks the hold: the client aborts it and opens each transaction itself from then on."""
    def old_new(url, req):
        return pb.NewTxnResponse(txn=pb.TxnId(most_bits=0, least_bits=next(transport._txn_ids)),
                                 timeout_ms=req.timeout_ms)

    transport.handlers["/v1/txn/new"] = old_new
    async with aio.Client(URL, transport=transport) as client:
        txns = await _busily(client, 40)
        blocks = [r for r in transport.new_requests() if r.count > 1]
        assert len(blocks) == 1
        assert all(t.deadline is None for t in txns)  # none came from a pool
        await wait_until(lambda: len(transport.aborted) == 1, what="the lone leased one aborted")
        assert transport.aborted[0] not in {t.txn_id.least_bits for t in txns}
