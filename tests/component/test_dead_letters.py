"""Dead-letter moves in process against real PostgreSQL: a message redelivered more often
than the policy allows is copied to the dead-letter partition and acknowledged on its
subscription in one SQL transaction, whether the dead-letter partition is served by the
same broker or another (its append called in process through the broker's RpcClient,
the route's handler), and nothing is written when either lease moved."""

from __future__ import annotations

import pytest

from magnetar_broker.commands import Position, Redeliver
from magnetar_broker.deadletter_ops import APPEND_PATH
from magnetar_broker.partition.sends import Batch
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_broker.subscription.deadrules import DeadLetterPolicy
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import pulsar_api_pb2 as pulsar_pb
from magnetar_protocol.cursorstate import decode_acks
from magnetar_protocol.pulsar import batches, stored
from magnetar_protocol.topics import TopicName
from tests.component.conftest import Broker
from tests.waiting import async_wait_until

TOPIC = "persistent://public/default/orders"
DLQ = "persistent://public/default/orders-s-DLQ"


async def nack_until_moved(broker: Broker, consumer: int, times: int) -> list[int]:
    """Fetch and nack everything ``times`` times; the redelivery counts seen."""
    counts = []
    for _ in range(times):
        entries = await broker.fetch(consumer)
        for e in entries:
            counts += list(e.redelivery_counts) or [0] * e.num_messages
        await broker.service.redeliver(Redeliver(consumer_id=consumer, session_id=broker.session))
    return counts


async def dlq_messages(pool, topic: str = DLQ) -> list[pb.SingleMessage]:
    rows = await pool.fetch("SELECT e.payload FROM entries e JOIN topics t USING (topic_id) WHERE t.topic = $1 "
                            "ORDER BY e.entry_id", topic)
    return [m for r in rows for m in pb.MessageBatch.FromString(r["payload"]).messages]


async def stored_cursor(pool, topic: str = TOPIC, sub: str = "s") -> tuple[int, dict[int, int]]:
    row = await pool.fetchrow("SELECT mark_delete_entry, acked_state FROM subscriptions s JOIN topics t "
                              "USING (topic_id) WHERE t.topic = $1 AND s.subscription = $2", topic, sub)
    return row["mark_delete_entry"], decode_acks(bytes(row["acked_state"]))


async def shared_consumer(broker: Broker, policy: DeadLetterPolicy) -> int:
    consumer = await broker.subscribe(TOPIC, "s", sub_type=pb.SUB_SHARED)
    sub = (await broker.partition(TOPIC)).subscriptions.get("s")
    sub.dead.client_policy = policy
    return consumer


async def test_a_message_past_the_limit_is_moved_with_its_properties_and_acknowledged(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(2, initial_subscription_name="audit"))
    await broker.send(producer, b"keep", first_seq=0)
    await broker.send(producer, b"poison", first_seq=1)
    await broker.ack(consumer, 0)  # "keep" is fine; "poison" fails every time
    assert await nack_until_moved(broker, consumer, 4) == [0, 1, 2]  # then moved, not delivered
    await async_wait_until(lambda: broker.service.consumers[consumer].subscription.dead.moved == 1, 10,
                           "the poison message moved")
    [copy] = await dlq_messages(pool)
    assert copy.payload == b"poison"
    assert dict(copy.properties) == {"REAL_TOPIC": TOPIC, "ORIGIN_MESSAGE_ID": "0:1:-1"}
    assert copy.sequence_id == 0  # the moves' own producer numbers its copies
    assert await stored_cursor(pool) == (1, {})  # acknowledged, in the same transaction
    # The initial subscription was created before the copy, so it has it to read.
    assert await stored_cursor(pool, DLQ, "audit") == (-1, {})
    assert await broker.fetch(consumer) == []
    stats = broker.service.consumers[consumer].subscription.stats()
    assert stats["msgDeadLettered"] == 1 and stats["deadLetterPolicy"]["maxRedeliverCount"] == 2


async def test_delivered_max_plus_one_times_then_moved(broker, pool):
    """Pulsar's count: max_redeliver_count redeliveries, then the next nack moves it."""
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(3))
    await broker.send(producer, b"m", first_seq=0)
    seen = await nack_until_moved(broker, consumer, 6)
    assert seen == [0, 1, 2, 3]
    await async_wait_until(lambda: broker.service.consumers[consumer].subscription.dead.moved == 1, 10, "moved")
    assert [m.payload for m in await dlq_messages(pool)] == [b"m"]


async def test_only_the_failing_messages_of_a_batch_move(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(1, dead_letter_topic="graveyard"))
    await broker.send(producer, b"a", b"b", b"c", first_seq=0)
    plog = await broker.partition(TOPIC)
    sub = plog.subscriptions.get("s")
    await broker.fetch(consumer)
    for _ in range(3):  # "b" is acknowledged in between: it never goes
        await broker.service.redeliver(Redeliver(consumer_id=consumer, session_id=broker.session))
        if _ == 0:
            await sub.ack(broker.service.consumers[consumer], [pb.Position(entry_id=0, batch_index=1)], False)
        await broker.fetch(consumer)
    await async_wait_until(lambda: sub.dead.moved == 2, 10, "two messages moved")
    copies = await dlq_messages(pool, "persistent://public/default/graveyard")
    assert [(m.payload, m.properties["ORIGIN_MESSAGE_ID"]) for m in copies] == [(b"a", "0:0:-1:0"),
                                                                                  (b"c", "0:0:-1:2")]
    assert (await stored_cursor(pool))[0] == 0  # all three acknowledged now


async def test_nothing_is_written_when_the_source_lease_moved(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(1))
    await broker.send(producer, b"m", first_seq=0)
    plog = await broker.partition(TOPIC)
    sub = plog.subscriptions.get("s")
    await nack_until_moved(broker, consumer, 2)  # delivered twice, nacked twice: past the limit
    # Another broker takes the source partition over before the move is written.
    await pool.execute("UPDATE topic_owners SET broker_id = NULL, epoch = epoch + 1 "
                       "WHERE topic_id = $1", plog.topic_id)
    await broker.fetch(consumer)  # dooms it; the move is refused: the source's lease moved
    await async_wait_until(lambda: sub.dead.pending() == 1 and sub.dead._retry_at > 0, 10,
                           "the refused move waits to be tried again")
    assert await dlq_messages(pool) == []
    assert await stored_cursor(pool) == (-1, {})


@pytest.fixture
async def other(pool, database_url):
    """A second broker in this process, sharing the database."""
    url = "http://broker.other:8080"
    settings = BrokerSettings(database_url=database_url, broker_id="b-other", advertised_url=url)
    service = BrokerService(BrokerStore(pool, settings.resolved_broker_id), settings)
    await service.store.register(url)
    yield service
    for plog in list(service.ownership.logs.values()):
        plog.lose("test over")


async def owned_by(service: BrokerService, pool, topic: str) -> None:
    topic_id = await service.ownership.topic_id(TopicName.parse(topic), create=True)
    await pool.execute("UPDATE topic_owners SET broker_id = $2, epoch = epoch + 1 WHERE topic_id = $1",
                       topic_id, service.broker_id)


async def test_the_dead_letter_partition_served_by_another_broker_writes_the_move(broker, other, pool):
    dlq = TopicName.parse(DLQ)
    await owned_by(other, pool, DLQ)
    await owned_by(broker.service, pool, TOPIC)
    target = await other.ownership.get_log(dlq)
    # The source's call to the other broker's route runs that route's handler here.
    broker.service.rpc.serve_locally("http://broker.other:8080", {APPEND_PATH: other.dead_letters.append}, "")
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(1))
    await broker.send(producer, b"x", first_seq=0)
    await nack_until_moved(broker, consumer, 2)
    await broker.fetch(consumer)
    sub = broker.service.consumers[consumer].subscription
    await async_wait_until(lambda: sub.dead.moved == 1, 10, "moved through the other broker")
    assert [m.payload for m in await dlq_messages(pool)] == [b"x"]
    assert target.next_entry_id == 1  # its writer applied the copy
    assert await stored_cursor(pool) == (0, {})


async def test_a_pulsar_batch_stored_as_sent_is_moved_message_by_message(broker, pool):
    """A Pulsar producer's entry is an envelope: the move opens it as Magnetar's readers
    do, each copy keeping its payload and properties."""
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(1))
    inner = pb.MessageBatch(messages=[pb.SingleMessage(payload=f"w{i}".encode(), sequence_id=i,
                                                       properties={"n": str(i)}) for i in range(2)])
    metadata, payload = batches.to_pulsar_entry(inner, producer_name="p", publish_time=1, batched=True)
    [sent] = await broker.service.publish(broker.session, [Batch(
        producer_id=producer, payload=stored.envelope_batch(metadata.SerializeToString(), metadata, payload),
        num_messages=2, sequence_id=0, highest_sequence_id=1)])
    assert not isinstance(sent, Exception)
    await nack_until_moved(broker, consumer, 3)
    sub = broker.service.consumers[consumer].subscription
    await async_wait_until(lambda: sub.dead.moved == 2, 10, "both messages moved")
    assert [(m.payload, dict(m.properties)) for m in await dlq_messages(pool)] == [
        (b"w0", {"n": "0", "REAL_TOPIC": TOPIC, "ORIGIN_MESSAGE_ID": "0:0:-1:0"}),
        (b"w1", {"n": "1", "REAL_TOPIC": TOPIC, "ORIGIN_MESSAGE_ID": "0:0:-1:1"})]
    assert (await stored_cursor(pool))[0] == 0


async def test_messages_of_a_batch_held_while_the_rest_is_moved_are_still_moved_when_nacked(broker, pool):
    """The bench's stall (bench/deadletter.py): a batch redelivered in parts, some of its
    messages out with the consumer while the others pass the limit.  The redelivery that
    found nothing left to deliver of the entry once dropped the entry's whole
    bookkeeping, the held messages too: their nack then found nothing to take back, and
    they stayed unacknowledged in none of the queues until the consumer reconnected."""
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(1))
    await broker.send(producer, *[f"m{i}".encode() for i in range(10)], first_seq=0)
    sub = broker.service.consumers[consumer].subscription

    async def nack(*indices: int) -> None:
        await broker.service.redeliver(Redeliver(consumer_id=consumer, session_id=broker.session,
                                                 positions=tuple(Position(0, i) for i in indices)))

    await broker.fetch(consumer)                      # all ten, redelivery count 0
    await nack(*range(10))
    [first] = await broker.fetch(consumer, max_messages=5)
    [second] = await broker.fetch(consumer, max_messages=5)
    assert list(first.indices) == [0, 1, 2, 3, 4] and list(second.indices) == [5, 6, 7, 8, 9]
    await nack(0, 1, 2, 3, 4)                         # past the limit: these move ...
    assert await broker.fetch(consumer) == []
    await async_wait_until(lambda: sub.dead.moved == 5, 10, "the first five moved")
    await nack(5, 6, 7, 8, 9)                         # ... and these, held meanwhile, too
    assert await broker.fetch(consumer) == []
    await async_wait_until(lambda: sub.dead.moved == 10, 10, "the other five moved too")
    assert sorted(m.payload for m in await dlq_messages(pool)) == [f"m{i}".encode() for i in range(10)]
    assert (await stored_cursor(pool))[0] == 0


async def test_an_encrypted_batch_moves_whole_with_its_first_message_past_the_limit(broker, pool):
    """The broker cannot open an encrypted entry: it is copied as it is, so the move
    acknowledges all its messages, not only the one past the limit (each message in
    exactly one place)."""
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared_consumer(broker, DeadLetterPolicy(1))
    metadata = pulsar_pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3,
                                         encryption_keys=[pulsar_pb.EncryptionKeys(key="rsa", value=b"w")])
    [sent] = await broker.service.publish(broker.session, [Batch(
        producer_id=producer, payload=stored.envelope_batch(metadata.SerializeToString(), metadata, b"sealed"),
        num_messages=3, sequence_id=0, highest_sequence_id=2)])
    assert not isinstance(sent, Exception)

    async def nack(*indices: int) -> None:
        await broker.service.redeliver(Redeliver(consumer_id=consumer, session_id=broker.session,
                                                 positions=tuple(Position(0, i) for i in indices)))

    await broker.fetch(consumer)
    await nack(0, 1, 2)
    await broker.fetch(consumer)   # all three again, count 1
    await nack(0)                  # only the first passes the limit
    assert await broker.fetch(consumer) == []
    sub = broker.service.consumers[consumer].subscription
    await async_wait_until(lambda: sub.dead.moved == 3, 10, "the encrypted batch moved")
    [copy] = await dlq_messages(pool)
    assert copy.payload == b"sealed" and stored.message_count([copy]) == 3
    assert {p.key for p in stored.metadata_of(copy).properties} == {"REAL_TOPIC", "ORIGIN_MESSAGE_ID"}
    assert (await stored_cursor(pool))[0] == 0   # all three acknowledged with the move
