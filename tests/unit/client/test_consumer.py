"""Consumers and readers against a scripted transport."""

import asyncio
import time

import pytest

import magnetar
import magnetar.asyncio as aio
from magnetar_protocol import errors
from magnetar_protocol import magnetar_pb2 as pb

from .fakes import FakeTransport, wait_until

URL = "http://any-broker:8080"


def entry(entry_id, payloads, indices=(), counts=()):
    batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=p, sequence_id=i)
                                      for i, p in enumerate(payloads)])
    return pb.DeliveredEntry(entry_id=entry_id, batch=batch.SerializeToString(),
                             num_messages=len(payloads), publish_time=123, producer_name="p",
                             indices=list(indices), redelivery_counts=list(counts))


class Deliveries:
    """Fetch answers: each scripted list of entries once, then empty long polls."""

    def __init__(self, transport, *answers):
        self.answers = list(answers)
        self.transport = transport
        transport.handlers["/v1/consumers/fetch"] = self

    async def __call__(self, url, req):
        if self.answers:
            return pb.FetchResponse(entries=self.answers.pop(0))
        await asyncio.sleep(0.02)
        return pb.FetchResponse()


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
async def client(transport):
    client = aio.Client(URL, transport=transport, operation_timeout_seconds=2)
    yield client
    await client.close()


async def test_subscribe_sends_the_subscription_and_receives_fetched_messages(client, transport):
    Deliveries(transport, [entry(4, [b"a", b"b"])])
    consumer = await client.subscribe("t", "sub", consumer_type=magnetar.ConsumerType.Shared,
                                      initial_position=magnetar.InitialPosition.Earliest,
                                      consumer_name="c1", receiver_queue_size=50)
    first = await consumer.receive(timeout_millis=5000)
    second = await consumer.receive(timeout_millis=5000)
    assert [first.data(), second.data()] == [b"a", b"b"]
    assert second.message_id() == magnetar.MessageId(-1, 4, 1, 2)
    [sub] = transport.sent("/v1/consumers/subscribe")
    assert (sub.subscription, sub.sub_type, sub.initial_position, sub.consumer_name, sub.durable) == (
        "sub", pb.SUB_SHARED, pb.INITIAL_EARLIEST, "c1", True)
    fetch = transport.sent("/v1/consumers/fetch")[0]
    assert fetch.max_messages == 50 and 1000 <= fetch.wait_ms <= 5000


async def test_receive_times_out_with_magnetar_timeout(client, transport):
    consumer = await client.subscribe("t", "sub")
    started = time.monotonic()
    with pytest.raises(magnetar.Timeout):
        await consumer.receive(timeout_millis=100)
    assert time.monotonic() - started >= 0.09


async def test_fetch_asks_only_for_free_receiver_queue_space(client, transport):
    Deliveries(transport, [entry(0, [b"1", b"2", b"3"])])
    consumer = await client.subscribe("t", "sub", receiver_queue_size=5)
    await wait_until(lambda: len(transport.sent("/v1/consumers/fetch")) >= 2, what="a second fetch")
    assert [f.max_messages for f in transport.sent("/v1/consumers/fetch")[:2]] == [5, 2]
    await consumer.receive(timeout_millis=1000)


async def test_plain_acks_are_grouped_into_one_request(client, transport):
    Deliveries(transport, [entry(0, [b"a", b"b", b"c"]), entry(1, [b"d", b"e"])])
    consumer = await client.subscribe("t", "sub")
    msgs = [await consumer.receive(timeout_millis=5000) for _ in range(5)]
    for m in msgs[:4]:
        await consumer.acknowledge(m)
    await wait_until(lambda: transport.sent("/v1/consumers/ack"), what="the grouped ack")
    [ack] = transport.sent("/v1/consumers/ack")
    assert ack.ack_type == pb.ACK_INDIVIDUAL
    # Entry 0 was acknowledged whole: one position; of entry 1 only the first message.
    assert [(p.entry_id, p.batch_index) for p in ack.positions] == [(0, -1), (1, 0)]


async def test_pending_acks_are_flushed_on_close(transport):
    Deliveries(transport, [entry(3, [b"a"])])
    client = aio.Client(URL, transport=transport)
    consumer = await client.subscribe("t", "sub")
    msg = await consumer.receive(timeout_millis=5000)
    await consumer.acknowledge_cumulative(msg)
    await consumer.close()
    acks = transport.sent("/v1/consumers/ack")
    assert [(a.ack_type, a.positions[0].entry_id) for a in acks] == [(pb.ACK_CUMULATIVE, 3)]
    assert transport.sent("/v1/consumers/close")[0].unsubscribe is False
    await client.close()


async def test_cumulative_ack_on_a_shared_subscription_is_refused(client, transport):
    consumer = await client.subscribe("t", "sub", consumer_type=magnetar.ConsumerType.Shared)
    with pytest.raises(magnetar.NotAllowedError):
        await consumer.acknowledge_cumulative(magnetar.MessageId(-1, 0, 0))


async def test_an_ack_that_failed_transiently_is_sent_again(client, transport):
    failures = [errors.ConnectError("reset")]
    transport.handlers["/v1/consumers/ack"] = (
        lambda url, req: failures.pop(0) if failures else pb.AckResponse())
    consumer = await client.subscribe("t", "sub")
    await consumer.acknowledge(magnetar.MessageId(-1, 8, 0))
    await wait_until(lambda: len(transport.sent("/v1/consumers/ack")) == 2, what="the ack retry")
    assert [a.positions[0].entry_id for a in transport.sent("/v1/consumers/ack")] == [8, 8]


async def test_a_transactional_ack_waits_and_raises_the_conflict(client, transport):
    consumer = await client.subscribe("t", "sub")
    transport.handlers["/v1/consumers/ack"] = lambda url, req: errors.TransactionConflict("held by (1,1)")
    txn = aio.Transaction(client.core, magnetar.TxnID(1, 2), "http://coordinator", 60000)
    with pytest.raises(magnetar.TransactionConflict):
        await consumer.acknowledge(magnetar.MessageId(-1, 5, 0), txn=txn)
    [ack] = transport.sent("/v1/consumers/ack")
    assert (ack.txn.most_bits, ack.txn.least_bits) == (1, 2)


async def test_negative_ack_asks_for_redelivery_after_the_delay(client, transport):
    consumer = await client.subscribe("t", "sub", negative_ack_redelivery_delay_ms=200)
    started = time.monotonic()
    consumer.negative_acknowledge(magnetar.MessageId(-1, 6, 1))
    await wait_until(lambda: transport.sent("/v1/consumers/redeliver"), what="the redelivery")
    assert time.monotonic() - started >= 0.19
    [req] = transport.sent("/v1/consumers/redeliver")
    assert [(p.entry_id, p.batch_index) for p in req.positions] == [(6, 1)]


async def test_a_lapsed_session_resubscribes_and_drops_what_the_old_one_delivered(client, transport):
    gate = asyncio.Event()
    answers = [[entry(0, [b"old-0", b"old-1"])], errors.SessionNotFound("expired"),
               [entry(0, [b"old-0", b"old-1"], indices=[0, 1], counts=[1, 1])]]

    async def fetch(url, req):
        if answers:
            item = answers.pop(0)
            if isinstance(item, Exception):
                await gate.wait()
                return item
            return pb.FetchResponse(entries=item)
        await asyncio.sleep(0.02)
        return pb.FetchResponse()
    transport.handlers["/v1/consumers/fetch"] = fetch
    consumer = await client.subscribe("t", "sub")
    first = await consumer.receive(timeout_millis=5000)
    gate.set()  # now the session lapses; old-1 is still in the receiver queue
    await wait_until(lambda: len(transport.sent("/v1/consumers/subscribe")) == 2, what="resubscribe")
    again = await consumer.receive(timeout_millis=5000)
    assert first.data() == b"old-0" and first.redelivery_count() == 0
    assert (again.data(), again.redelivery_count()) == (b"old-0", 1)  # the stale old-1 was dropped
    assert len(transport.sent("/v1/sessions/open")) == 2


async def test_a_partitioned_topic_merges_every_partition(transport):
    transport.partitions = 2
    answers = {}

    async def fetch(url, req):
        if req.consumer_id not in answers:
            answers[req.consumer_id] = True
            return pb.FetchResponse(entries=[entry(0, [str(req.consumer_id).encode()])])
        await asyncio.sleep(0.02)
        return pb.FetchResponse()
    transport.handlers["/v1/consumers/fetch"] = fetch
    async with aio.Client(URL, transport=transport) as client:
        consumer = await client.subscribe("t", "sub")
        got = [await consumer.receive(timeout_millis=5000) for _ in range(2)]
    assert sorted(m.message_id().partition() for m in got) == [0, 1]
    assert sorted(s.topic for s in transport.sent("/v1/consumers/subscribe")) == [
        "persistent://public/default/t-partition-0", "persistent://public/default/t-partition-1"]


async def test_unsubscribe_closes_with_unsubscribe(client, transport):
    consumer = await client.subscribe("t", "sub")
    await consumer.unsubscribe()
    assert transport.sent("/v1/consumers/close")[0].unsubscribe is True
    with pytest.raises(magnetar.AlreadyClosed):
        await consumer.receive(timeout_millis=10)


async def test_a_reader_is_a_non_durable_subscription_from_its_start(client, transport):
    Deliveries(transport, [entry(0, [b"a", b"b"])])
    reader = await client.create_reader("t", magnetar.MessageId.earliest)
    assert (await reader.read_next(timeout_millis=5000)).data() == b"a"
    [sub] = transport.sent("/v1/consumers/subscribe")
    assert not sub.durable and sub.start_inclusive
    assert (sub.start_position.entry_id, sub.start_position.batch_index) == (0, -1)


async def test_a_reconnected_reader_restarts_after_the_last_message_it_returned(client, transport):
    gate = asyncio.Event()
    answers = [[entry(0, [b"a", b"b", b"c"])], errors.NotOwner("moved")]

    async def fetch(url, req):
        if answers:
            item = answers.pop(0)
            if isinstance(item, Exception):
                await gate.wait()
                return item
            return pb.FetchResponse(entries=item)
        await asyncio.sleep(0.02)
        return pb.FetchResponse()
    transport.handlers["/v1/consumers/fetch"] = fetch
    reader = await client.create_reader("t", magnetar.MessageId.latest)
    await reader.read_next(timeout_millis=5000)
    await reader.read_next(timeout_millis=5000)   # returned (0, 1); (0, 2) is still queued
    gate.set()
    await wait_until(lambda: len(transport.sent("/v1/consumers/subscribe")) == 2, what="resubscribe")
    again = transport.sent("/v1/consumers/subscribe")[1]
    assert (again.start_position.entry_id, again.start_position.batch_index,
            again.start_inclusive) == (0, 1, False)


async def test_has_message_available_compares_the_last_message_with_the_last_returned(client, transport):
    Deliveries(transport, [entry(0, [b"a", b"b"])])
    transport.handlers["/v1/consumers/last-message-id"] = lambda url, req: pb.LastMessageIdResponse(
        has_message=True, last=pb.MessageIdData(partition=-1, entry_id=0, batch_index=1, batch_size=2))
    reader = await client.create_reader("t", magnetar.MessageId.earliest)
    assert await reader.has_message_available()
    await reader.read_next(timeout_millis=5000)
    assert await reader.has_message_available()
    await reader.read_next(timeout_millis=5000)
    assert not await reader.has_message_available()


async def test_seek_sends_the_position_and_drops_what_was_queued(client, transport):
    Deliveries(transport, [entry(0, [b"a", b"b"])])
    consumer = await client.subscribe("t", "sub")
    await consumer.receive(timeout_millis=5000)      # "b" waits in the queue
    await consumer.seek(magnetar.MessageId(-1, 0, 0))
    await consumer.seek(1700000000000)
    with pytest.raises(magnetar.Timeout):
        await consumer.receive(timeout_millis=100)   # "b" predates the seek
    by_id, by_time = transport.sent("/v1/consumers/seek")
    assert (by_id.position.entry_id, by_id.position.batch_index) == (0, 0)
    assert by_time.publish_time == 1700000000000


async def test_a_partition_that_cannot_subscribe_closes_the_ones_that_did(transport):
    transport.partitions = 2
    subscribe = transport.handlers["/v1/consumers/subscribe"]
    transport.handlers["/v1/consumers/subscribe"] = (
        lambda url, req: errors.ConsumerBusy("exclusive")
        if req.topic.endswith("-partition-1") else subscribe(url, req))
    async with aio.Client(URL, transport=transport) as client:
        with pytest.raises(errors.ConsumerBusy):
            await client.subscribe("t", "sub")
    assert len(transport.sent("/v1/consumers/close")) == 1


async def test_the_ack_flusher_sleeps_between_groups_and_wakes_for_the_next_ack(client, transport):
    transport.handlers["/v1/consumers/ack"] = lambda url, req: pb.AckResponse()
    consumer = await client.subscribe("t", "sub")
    await consumer.acknowledge(magnetar.MessageId(-1, 1, 0))
    await wait_until(lambda: len(transport.sent("/v1/consumers/ack")) == 1, what="the first group")
    await wait_until(lambda: not consumer._ack_queued.is_set(), what="the flusher asleep")
    # The next ack comes from another thread (the sync API's callers).
    await asyncio.get_running_loop().run_in_executor(
        None, consumer.ack_nowait, magnetar.MessageId(-1, 2, 0))
    await wait_until(lambda: len(transport.sent("/v1/consumers/ack")) == 2, what="the second group")
    assert [a.positions[0].entry_id for a in transport.sent("/v1/consumers/ack")] == [1, 2]
