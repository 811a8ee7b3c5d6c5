"""The producer against a scripted transport: what it sends, and how it retries."""

import asyncio
import time
import zlib

import pytest

import magnetar
import magnetar.asyncio as aio
from magnetar_protocol import errors
from magnetar_protocol import magnetar_pb2 as pb

from .fakes import BROKER, FakeTransport, batches, decode, wait_until

URL = "http://any-broker:8080"


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
async def client(transport):
    client = aio.Client(URL, transport=transport, operation_timeout_seconds=2)
    yield client
    await client.close()


async def test_a_new_name_starts_at_sequence_zero_and_ids_come_from_the_receipt(client, transport):
    producer = await client.create_producer("t", producer_name="p1")
    first = await producer.send(b"a")
    second = await producer.send(b"b")
    assert [b.sequence_id for b in batches(transport)] == [0, 1]
    assert first == magnetar.MessageId(-1, 0, 0, 1) and second == magnetar.MessageId(-1, 1, 0, 1)
    assert producer.last_sequence_id() == 1
    assert producer.producer_name() == "p1"
    create = transport.sent("/v1/producers/create")[0]
    assert create.producer_name == "p1" and create.user_provided_name
    assert create.session_id.startswith("s")  # the session the fake opened


async def test_a_known_name_continues_after_the_brokers_last_sequence_id(transport):
    transport.last_sequence_id = 41
    async with aio.Client(URL, transport=transport) as client:
        producer = await client.create_producer("t", producer_name="p1")
        assert producer.last_sequence_id() == 41
        await producer.send(b"x")
    assert batches(transport)[0].sequence_id == 42


async def test_initial_sequence_id_plus_one_is_the_first_id(client, transport):
    transport.last_sequence_id = 500  # ignored when the user sets initial_sequence_id
    producer = await client.create_producer("t", initial_sequence_id=9)
    await producer.send(b"x")
    assert batches(transport)[0].sequence_id == 10


async def test_discovery_asks_metadata_then_lookup_then_creates_on_the_owner(client, transport):
    await client.create_producer("t")
    paths = [(url, path) for url, path, _ in transport.calls]
    assert paths[:4] == [(URL, "/v1/topics/metadata"), (URL, "/v1/topics/lookup"),
                         (BROKER, "/v1/sessions/open"), (BROKER, "/v1/producers/create")]


async def test_a_batch_is_sent_as_one_message_batch_with_its_sequence_range(client, transport):
    producer = await client.create_producer("t", batching_max_publish_delay_ms=50)
    results = []
    for i in range(5):
        producer.send_async(f"m{i}".encode(), lambda r, m: results.append((r, m)),
                            properties={"i": str(i)} if i == 2 else None)
    await producer.flush()
    [send] = batches(transport)
    assert (send.num_messages, send.sequence_id, send.highest_sequence_id) == (5, 0, 4)
    msgs = decode(send)
    assert [m.payload for m in msgs] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [m.sequence_id for m in msgs] == [0, 1, 2, 3, 4]
    assert dict(msgs[2].properties) == {"i": "2"} and not msgs[1].properties
    assert results == [(magnetar.Result.Ok, magnetar.MessageId(-1, 0, i, 5)) for i in range(5)]


async def test_sends_awaited_together_share_a_batch_and_none_waits_for_the_delay(client, transport):
    # A publish delay no test would wait out: send() must not wait for it.
    producer = await client.create_producer("t", batching_max_publish_delay_ms=600_000)
    ids = await asyncio.wait_for(asyncio.gather(*(producer.send(b"%d" % i) for i in range(50))), 10)
    [send] = batches(transport)  # one turn of the event loop, one batch (was 50)
    assert send.num_messages == 50
    assert ids == [magnetar.MessageId(-1, 0, i, 50) for i in range(50)]
    lone = await asyncio.wait_for(producer.send(b"alone"), 10)
    assert lone == magnetar.MessageId(-1, 1, 0, 1)


async def test_a_retry_resends_the_same_bytes_and_sequence_ids(client, transport):
    producer = await client.create_producer("t")
    answer = transport.handlers["/v1/producers/send-batches"]
    failures = [errors.ConnectError("reset"), errors.ServiceNotReady("db restarting")]
    transport.handlers["/v1/producers/send-batches"] = (
        lambda url, req: failures.pop(0) if failures else answer(url, req))
    msg_id = await producer.send(b"payload", sequence_id=77)
    sent = batches(transport)
    assert len(sent) == 3
    assert len({(b.batch, b.sequence_id, b.highest_sequence_id) for b in sent}) == 1
    assert msg_id.entry_id() == 0
    # Each failure re-created the producer (after a fresh lookup) before the retry.
    assert len(transport.sent("/v1/producers/create")) == 3


async def test_a_duplicate_answer_is_success(client, transport):
    producer = await client.create_producer("t")
    transport.handlers["/v1/producers/send-batches"] = lambda url, req: pb.SendBatchesResponse(
        results=[pb.SendResult(response=pb.SendResponse(duplicate=True, last_sequence_id=9))])
    msg_id = await producer.send(b"x", sequence_id=3)
    assert msg_id.entry_id() == -1
    assert producer.last_sequence_id() == 3


async def test_a_too_big_message_raises_without_a_request(transport):
    transport.max_message_size = 10
    async with aio.Client(URL, transport=transport) as client:
        producer = await client.create_producer("t")
        with pytest.raises(magnetar.MessageTooBig):
            await producer.send(b"x" * 11)
        with pytest.raises(magnetar.MessageTooBig):
            producer.send_async(b"x" * 11, lambda r, m: None)
        await producer.send(b"x" * 10)
    assert [len(decode(b)[0].payload) for b in batches(transport)] == [10]


async def test_batches_stay_within_the_brokers_message_size(transport):
    transport.max_message_size = 100
    async with aio.Client(URL, transport=transport) as client:
        producer = await client.create_producer("t", batching_max_publish_delay_ms=100)
        for _ in range(5):
            producer.send_async(b"y" * 40, lambda r, m: None)
        await producer.flush()
    assert [b.num_messages for b in batches(transport)] == [2, 2, 1]


async def test_fenced_is_raised_not_retried_and_later_sends_fail_at_once(client, transport):
    producer = await client.create_producer("t", access_mode=magnetar.ProducerAccessMode.Exclusive)
    transport.handlers["/v1/producers/send-batches"] = lambda url, req: pb.SendBatchesResponse(
        results=[pb.SendResult(error=pb.Error(code=pb.PRODUCER_FENCED, message="epoch 3 took over"))])
    with pytest.raises(magnetar.ProducerFenced):
        await producer.send(b"x")
    with pytest.raises(magnetar.ProducerFenced):
        await producer.send(b"y")
    assert len(batches(transport)) == 1


async def test_a_busy_name_is_raised_at_creation(client, transport):
    transport.handlers["/v1/producers/create"] = lambda url, req: errors.ProducerBusy("taken")
    with pytest.raises(magnetar.ProducerBusy):
        await client.create_producer("t", producer_name="dup")
    assert len(transport.sent("/v1/producers/create")) == 1


async def test_an_exclusive_producer_presents_its_topic_epoch_when_it_reconnects(client, transport):
    create = transport.handlers["/v1/producers/create"]

    def with_epoch(url, req):
        reply = create(url, req)
        reply.topic_epoch = 7
        return reply
    transport.handlers["/v1/producers/create"] = with_epoch
    producer = await client.create_producer("t", access_mode=magnetar.ProducerAccessMode.Exclusive)
    answer = transport.handlers["/v1/producers/send-batches"]
    failures = [errors.NotOwner("moved")]
    transport.handlers["/v1/producers/send-batches"] = (
        lambda url, req: failures.pop(0) if failures else answer(url, req))
    await producer.send(b"x")
    first, again = transport.sent("/v1/producers/create")
    assert first.access_mode == pb.ACCESS_EXCLUSIVE and not first.HasField("topic_epoch")
    assert again.HasField("topic_epoch") and again.topic_epoch == 7


async def test_a_lapsed_session_is_reopened_and_the_producer_recreated(client, transport):
    producer = await client.create_producer("t", producer_name="p")
    answer = transport.handlers["/v1/producers/send-batches"]
    failures = [errors.SessionNotFound("expired")]
    transport.handlers["/v1/producers/send-batches"] = (
        lambda url, req: failures.pop(0) if failures else answer(url, req))
    await producer.send(b"x")
    opens = transport.sent("/v1/sessions/open")
    creates = transport.sent("/v1/producers/create")
    assert len(opens) == 2 and len(creates) == 2
    assert creates[1].producer_name == "p"
    assert creates[0].session_id != creates[1].session_id


async def test_a_send_that_keeps_failing_times_out_at_send_timeout(client, transport):
    producer = await client.create_producer("t", send_timeout_millis=300)
    transport.handlers["/v1/producers/send-batches"] = lambda url, req: errors.ConnectError("down")
    started = time.monotonic()
    with pytest.raises(magnetar.Timeout):
        await producer.send(b"x")
    assert 0.25 < time.monotonic() - started < 2.0
    assert len(set(b.batch for b in batches(transport))) == 1


async def test_wait_for_exclusive_waits_beyond_the_operation_timeout(transport):
    # Queued answers and broker restarts, together longer than the operation timeout.
    script = iter(["wait", "wait", errors.ConnectError("restart"), errors.ConnectError("restart"),
                   errors.ServiceNotReady("starting"), "wait", "wait", "created"])
    create = transport.handlers["/v1/producers/create"]

    async def queued(url, req):
        step = next(script)
        if step == "wait":
            await asyncio.sleep(0.15)  # the broker's long poll, shortened
            return pb.CreateProducerResponse(producer_name="waiter-1", waiting=True)
        if isinstance(step, Exception):
            return step
        return create(url, req)
    transport.handlers["/v1/producers/create"] = queued
    async with aio.Client(URL, transport=transport, operation_timeout_seconds=0.3) as client:
        started = time.monotonic()
        producer = await client.create_producer(
            "t", access_mode=magnetar.ProducerAccessMode.WaitForExclusive)
        assert time.monotonic() - started > 0.3
        assert producer.producer_name() == "waiter-1"
    creates = transport.sent("/v1/producers/create")
    assert len(creates) == 8 and creates[0].wait_ms > 0
    assert all(c.producer_name == "waiter-1" for c in creates[2:])  # keeps its place


async def test_keyed_messages_go_to_crc32_partition_and_unkeyed_rotate_per_batch(transport):
    transport.partitions = 3
    async with aio.Client(URL, transport=transport) as client:
        producer = await client.create_producer("t", batching_max_messages=2,
                                                batching_max_publish_delay_ms=100)
        ids = [await producer.send(b"k", partition_key="user-7") for _ in range(3)]
        for _ in range(6):
            producer.send_async(b"u", lambda r, m: None)
        await producer.flush()
    import zlib
    assert {i.partition() for i in ids} == {zlib.crc32(b"user-7") % 3}
    by_producer = {}
    for b in batches(transport)[3:]:
        by_producer.setdefault(b.producer_id, []).append(b.num_messages)
    assert sorted(by_producer.values()) == [[2], [2], [2]]  # one full batch on each partition


async def test_transaction_ids_travel_with_transactional_batches(client, transport):
    producer = await client.create_producer("t")
    txn = aio.Transaction(client.core, magnetar.TxnID(3, 9), "http://coordinator", 60000)
    msg_id = await producer.send(b"in-txn", txn=txn)
    await producer.send(b"plain")
    in_txn, plain = batches(transport)
    assert (in_txn.txn.most_bits, in_txn.txn.least_bits) == (3, 9)
    assert not plain.HasField("txn")
    assert msg_id.entry_id() == -1  # positions of transactional messages come at commit


async def test_close_flushes_and_later_sends_raise_already_closed(client, transport):
    producer = await client.create_producer("t", batching_max_publish_delay_ms=1000)
    done = []
    producer.send_async(b"x", lambda r, m: done.append(r))
    await producer.close()
    assert done == [magnetar.Result.Ok]
    assert len(transport.sent("/v1/producers/close")) == 1
    with pytest.raises(magnetar.AlreadyClosed):
        await producer.send(b"y")


async def test_a_failing_send_calls_back_with_the_exception(client, transport):
    producer = await client.create_producer("t")
    transport.handlers["/v1/producers/send-batches"] = lambda url, req: errors.AuthorizationError("no")
    outcome = []
    producer.send_async(b"x", lambda r, m: outcome.append((r, m)))
    await wait_until(lambda: outcome, what="the callback")
    assert isinstance(outcome[0][0], magnetar.AuthorizationError) and outcome[0][1] is None


async def test_a_partition_that_cannot_be_created_closes_the_ones_that_were(transport):
    transport.partitions = 3
    create = transport.handlers["/v1/producers/create"]
    transport.handlers["/v1/producers/create"] = (
        lambda url, req: errors.ProducerFenced("exclusive elsewhere")
        if req.topic.endswith("-partition-2") else create(url, req))
    async with aio.Client(URL, transport=transport) as client:
        with pytest.raises(magnetar.ProducerFenced):
            await client.create_producer("t")
    assert len(transport.sent("/v1/producers/close")) == 2


async def test_an_unknown_producer_is_recreated_in_the_same_session(client, transport):
    producer = await client.create_producer("t", producer_name="p")
    answer = transport.handlers["/v1/producers/send-batches"]
    failures = [errors.ProducerNotFound("unloaded")]
    transport.handlers["/v1/producers/send-batches"] = (
        lambda url, req: failures.pop(0) if failures else answer(url, req))
    await producer.send(b"x")
    creates = transport.sent("/v1/producers/create")
    assert len(creates) == 2 and creates[0].session_id == creates[1].session_id
    assert len(transport.sent("/v1/sessions/open")) == 1  # the session was fine


async def test_a_retry_goes_out_as_the_producer_the_reconnect_created(client, transport):
    producer = await client.create_producer("t")
    answer = transport.handlers["/v1/producers/send-batches"]
    create = transport.handlers["/v1/producers/create"]
    sends = [errors.NotOwner("moved")]
    creates = [errors.ConnectError("new owner starting"), errors.ServiceNotReady("loading")]
    created = []

    def recreate(url, req):
        if creates:
            return creates.pop(0)
        created.append(create(url, req))
        return created[-1]
    transport.handlers["/v1/producers/send-batches"] = (
        lambda url, req: sends.pop(0) if sends else answer(url, req))
    transport.handlers["/v1/producers/create"] = recreate
    await producer.send(b"x")
    first, retry = batches(transport)
    assert len(transport.sent("/v1/producers/create")) == 4  # 1 + 2 failed + 1
    assert retry.producer_id == created[0].producer_id != first.producer_id
    assert retry.batch == first.batch
    assert len(transport.sent("/v1/sessions/open")) == 1


async def test_transactional_sends_and_acks_make_no_call_to_the_coordinator(client, transport):
    """The broker registers a partition or subscription with the transaction on its first
    send or ack there, so the client goes straight to the brokers (no AddPartitionToTxn,
    no waiting on the coordinator before the first send)."""
    transport.handlers["/v1/consumers/ack"] = lambda url, req: pb.AckResponse()
    first = await client.create_producer("out-1")
    second = await client.create_producer("out-2")
    consumer = await client.subscribe("in", "sub")
    txn = aio.Transaction(client.core, magnetar.TxnID(1, 5), "http://coordinator", 60000)
    await asyncio.gather(first.send(b"a", txn=txn), second.send(b"b", txn=txn),
                         consumer.acknowledge(magnetar.MessageId(-1, 3, 0), txn=txn))
    assert len(batches(transport)) == 2
    assert len(transport.sent("/v1/consumers/ack")) == 1
    assert not [path for _, path, _ in transport.calls if path.startswith("/v1/txn/")]


async def test_a_producer_takes_on_added_partitions_under_its_name_and_retries_a_failed_round(transport):
    transport.partitions = 2
    async with aio.Client(URL, transport=transport, partitions_update_interval_seconds=0,
                          operation_timeout_seconds=0.5) as client:
        producer = await client.create_producer("t", producer_name="p")
        assert producer.watch.task is None  # 0: never polled

        transport.partitions = 3
        transport.handlers["/v1/producers/create"] = lambda url, req: (_ for _ in ()).throw(
            errors.ServiceNotReady("broker starting"))
        await producer.watch.check()  # the new partition's producer could not be created
        assert len(producer.parts) == 2 and producer.watch.known == 2

        transport.handlers["/v1/producers/create"] = transport._create_producer
        await producer.watch.check()
        created = [req for _, path, req in transport.calls if path == "/v1/producers/create"]
        assert created[-1].topic.endswith("-partition-2") and created[-1].producer_name == "p"
        assert len(producer.parts) == 3 and producer.watch.known == 3
        key = next(k for k in (f"k{i}" for i in range(100)) if zlib.crc32(k.encode()) % 3 == 2)
        assert (await producer.send(b"x", partition_key=key)).partition() == 2


def test_the_partitions_update_interval_is_checked():
    for bad in (-1, float("nan"), float("inf"), "60", True):
        with pytest.raises(ValueError, match="partitions_update_interval_seconds"):
            aio.Client(URL, partitions_update_interval_seconds=bad)
