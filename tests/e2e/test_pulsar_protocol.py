"""The real `pulsar-client` wheel against a real local Magnetar (two brokers, each with
its Pulsar listener): discovery, produce with dedup and access modes, each consumer
kind, readers and seek, interop with Magnetar's own client, and bad frames.

One cluster for the module (starting one costs ~5 s); each test uses its own topics.
Every client call has a timeout; waits are deadlines (tests/waiting.py).
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import urllib.request
from datetime import timedelta

import pulsar
import pytest

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import frames
from magnetar_runtime.local.cluster import LocalCluster
from tests.e2e.conftest import TEST_ENV
from tests.e2e.helpers import keys_for_each_consumer
from tests.e2e.helpers import wheel_client as pulsar_client
from tests.waiting import wait_until

TIMEOUT_MS = 10_000
_topics = itertools.count()


def new_topic(prefix: str = "t") -> str:
    return f"persistent://public/default/pulsar-{prefix}-{next(_topics)}"


@pytest.fixture(scope="module")
def magnetar(postgres, migrated_template, tmp_path_factory):
    url = postgres.create_database("e2e_pulsar_protocol", template=migrated_template)
    cluster = LocalCluster(tmp_path_factory.mktemp("pulsar-cluster"), database_url=url, brokers=2,
                           registry=False, env=TEST_ENV)
    cluster.start()
    yield cluster
    cluster.close()
    postgres.drop_database("e2e_pulsar_protocol")


@pytest.fixture
def client(magnetar):
    c = pulsar_client(magnetar.pulsar_service_url)
    yield c
    c.close()


def receive_all(consumer, count: int) -> list:
    return [consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(count)]


# ---------------------------------------------------------------- produce and consume


def test_messages_round_trip_with_their_metadata(client):
    topic = new_topic("roundtrip")
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5)
    for i in range(12):
        producer.send_async(f"m{i}".encode(), None, properties={"i": str(i)}, partition_key=f"k{i % 3}",
                            ordering_key=f"o{i % 2}", event_timestamp=1_700_000_000_000 + i)
    producer.flush()
    got = receive_all(consumer, 12)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(12)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(12)]
    assert [m.partition_key() for m in got] == [f"k{i % 3}" for i in range(12)]
    assert [m.event_timestamp() for m in got] == [1_700_000_000_000 + i for i in range(12)]
    assert [m.ordering_key() for m in got] == [f"o{i % 2}" for i in range(12)]
    assert all(m.publish_timestamp() > 0 for m in got)
    for m in got:
        consumer.acknowledge(m)
    consumer.close()
    # Acknowledged on the broker: a new consumer of the subscription gets nothing old.
    producer.send(b"after")
    again = client.subscribe(topic, "sub")
    assert again.receive(timeout_millis=TIMEOUT_MS).data() == b"after"


def test_dedup_across_producer_re_creation(client):
    topic = new_topic("dedup")
    producer = client.create_producer(topic, producer_name="dedup-p", batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode(), sequence_id=i)
    producer.close()
    producer = client.create_producer(topic, producer_name="dedup-p", batching_enabled=False)
    assert producer.last_sequence_id() == 4           # PRODUCER_SUCCESS's last_sequence_id
    producer.send(b"duplicate", sequence_id=3)         # dropped: stored once already
    producer.send(b"m5", sequence_id=5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(TIMEOUT_MS).data() for _ in range(6)]
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]
    assert not reader.has_message_available()


def test_lookup_through_either_broker_reaches_the_owner(magnetar):
    topic = new_topic("lookup")
    clients = [pulsar_client(url) for url in magnetar.pulsar_urls]
    try:
        producers = [c.create_producer(topic, batching_enabled=False) for c in clients]
        for i, p in enumerate(producers):
            p.send(f"via broker {i}".encode())
        consumer = clients[1].subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert sorted(m.data() for m in receive_all(consumer, 2)) == [b"via broker 0", b"via broker 1"]
    finally:
        for c in clients:
            c.close()


def test_partitioned_topic_metadata_and_routing(magnetar, client):
    name = f"pulsar-parted-{next(_topics)}"
    urllib.request.urlopen(urllib.request.Request(
        f"{magnetar.admin_url}/admin/v2/persistent/public/default/{name}/partitions", data=b"3",
        method="PUT", headers={"content-type": "application/json"}), timeout=10).close()
    topic = f"persistent://public/default/{name}"
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(9):
        producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
    got = receive_all(consumer, 9)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(9))
    assert {m.topic_name() for m in got} <= {f"{topic}-partition-{i}" for i in range(3)}


# ---------------------------------------------------------------- access modes


def test_exclusive_producer_refuses_a_second_and_fencing_closes_the_first(client):
    topic = new_topic("exclusive")
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive,
                                   batching_enabled=False)
    first.send(b"one")
    with pytest.raises(pulsar.ProducerFenced):   # Pulsar's answer to a second Exclusive
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    fencer = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                                    batching_enabled=False)
    fencer.send(b"two")
    with pytest.raises((pulsar.ProducerFenced, pulsar.AlreadyClosed)):
        first.send(b"fenced")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(TIMEOUT_MS).data() for _ in range(2)] == [b"one", b"two"]
    assert not reader.has_message_available()


def test_wait_for_exclusive_gets_the_topic_when_the_holder_leaves(client):
    topic = new_topic("wait")
    holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    waiting = []
    thread = threading.Thread(target=lambda: waiting.append(client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive, batching_enabled=False)))
    thread.start()
    with pytest.raises(AssertionError):   # queued behind the holder (producer_ready false)
        wait_until(lambda: waiting, 1, "the WaitForExclusive producer to be created")
    holder.close()
    thread.join(timeout=15)
    assert waiting, "the WaitForExclusive producer was not created once the holder left"
    waiting[0].send(b"mine now")


# ---------------------------------------------------------------- consumers


def test_shared_consumers_split_and_nack_redelivers_with_a_count(client):
    topic = new_topic("shared")
    a = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=2,
                         negative_ack_redelivery_delay_ms=100)
    b = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=2)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(f"m{i}".encode())
    first = a.receive(timeout_millis=TIMEOUT_MS)
    assert first.redelivery_count() == 0
    a.negative_acknowledge(first)
    seen = wait_until(lambda: _find(a, first.data()), 15, "the nacked message to come back")
    assert seen.redelivery_count() == 1
    b.receive(timeout_millis=TIMEOUT_MS)   # the other consumer got its share


def _find(consumer, data: bytes):
    try:
        m = consumer.receive(timeout_millis=500)
    except pulsar.Timeout:
        return None
    if m.data() == data:
        return m
    consumer.acknowledge(m)
    return None


def test_failover_moves_to_the_next_consumer(client):
    topic = new_topic("failover")
    producer = client.create_producer(topic, batching_enabled=False)
    a = client.subscribe(topic, "f", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(topic, "f", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer.send(b"x")
    got = a.receive(timeout_millis=TIMEOUT_MS)   # "a" sorts first: active
    with pytest.raises(pulsar.Timeout):
        b.receive(timeout_millis=300)
    a.close()                                     # unacked "x" goes to "b"
    assert b.receive(timeout_millis=TIMEOUT_MS).data() == got.data()


def test_batch_index_ack_keeps_the_rest_of_the_batch(magnetar):
    c = pulsar_client(magnetar.pulsar_service_url)
    try:
        topic = new_topic("batchack")
        consumer = c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest,
                               batch_index_ack_enabled=True)
        producer = c.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                     batching_max_publish_delay_ms=1000)
        for i in range(4):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = receive_all(consumer, 4)
        consumer.acknowledge(got[1])
        consumer.close()
        wait_until(lambda: _redelivered(c, topic) == [b"m0", b"m2", b"m3"], 15,
                   "the unacknowledged messages of the batch (not m1) to be redelivered")
    finally:
        c.close()


def _redelivered(c, topic):
    consumer = c.subscribe(topic, "s", batch_index_ack_enabled=True)
    try:
        out = []
        while True:
            try:
                out.append(consumer.receive(timeout_millis=1000).data())
            except pulsar.Timeout:
                return out
    finally:
        consumer.close()


def test_cumulative_ack_and_seek(client):
    topic = new_topic("seek")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(consumer, 5)
    consumer.acknowledge_cumulative(got[4])
    consumer.seek(got[0].publish_timestamp())     # by time: from the first at or after it
    assert consumer.receive(timeout_millis=TIMEOUT_MS).data() == b"m0"
    consumer.seek(ids[2])
    # The broker restarts at m2 (Magnetar's seek, as Pulsar's resetCursor); the wheel
    # then drops its seek id itself (its startMessageId is exclusive), as with Pulsar.
    assert consumer.receive(timeout_millis=TIMEOUT_MS).data() == b"m3"


def test_reader_from_a_message_id(client):
    topic = new_topic("reader")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(4)]
    reader = client.create_reader(topic, ids[1])
    assert reader.read_next(TIMEOUT_MS).data() == b"m2"   # exclusive of the start id
    inclusive = client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    assert inclusive.read_next(TIMEOUT_MS).data() == b"m1"
    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()


def test_unsubscribe_forgets_the_subscription(client):
    topic = new_topic("unsub")
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"old")
    consumer.unsubscribe()
    producer.send(b"new")
    again = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"newest")
    assert again.receive(timeout_millis=TIMEOUT_MS).data() == b"newest"


# ---------------------------------------------------------------- one log, two protocols


def test_magnetar_and_pulsar_clients_read_each_other(magnetar, client):
    import magnetar as mclient

    topic = new_topic("interop")
    m = mclient.Client(",".join(magnetar.broker_urls))
    try:
        pulsar_producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=3,
                                                 compression_type=pulsar.CompressionType.LZ4)
        for i in range(3):
            pulsar_producer.send_async(f"p{i}".encode(), None, properties={"from": "pulsar"},
                                       partition_key="pk", ordering_key=f"ok{i}", event_timestamp=1000 + i)
        pulsar_producer.flush()
        m_producer = m.create_producer(topic)
        m_producer.send(b"m0", properties={"from": "magnetar"}, partition_key="mk", ordering_key=b"mo",
                        event_timestamp=2000)
        m_producer.flush()
        m_consumer = m.subscribe(topic, "mc", initial_position=mclient.InitialPosition.Earliest)
        got = [m_consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(4)]
        assert [g.data() for g in got] == [b"p0", b"p1", b"p2", b"m0"]
        assert got[0].properties() == {"from": "pulsar"} and got[0].partition_key() == "pk"
        assert [g.ordering_key() for g in got[:3]] == [b"ok0", b"ok1", b"ok2"]
        assert [g.event_timestamp() for g in got[:3]] == [1000, 1001, 1002]
        p_consumer = client.subscribe(topic, "pc", initial_position=pulsar.InitialPosition.Earliest)
        back = receive_all(p_consumer, 4)
        assert [b.data() for b in back] == [b"p0", b"p1", b"p2", b"m0"]
        assert back[3].properties() == {"from": "magnetar"} and back[3].partition_key() == "mk"
        assert back[3].ordering_key() == "mo" and back[3].event_timestamp() == 2000
        assert [b.publish_timestamp() for b in back] == [g.publish_timestamp() for g in got]
    finally:
        m.close()


def _raw_producer(magnetar, topic: str) -> tuple[socket.socket, str]:
    s = _owner_socket(magnetar, topic)
    s.sendall(frames.encode(pb.CommandProducer(topic=topic, producer_id=1, request_id=1)))
    created = _next_of(s, pb.BaseCommand.PRODUCER_SUCCESS)
    return s, created.producer_name


def _raw_messages(magnetar, topic: str, count: int) -> list:
    """``count`` MESSAGE frames (metadata and payload as the broker sent them) read by a
    frame-level consumer: the wheel shows neither null values nor deliver_at_time."""
    s = _owner_socket(magnetar, topic)
    s.sendall(frames.encode(pb.CommandSubscribe(
        topic=topic, subscription=f"raw{next(_topics)}", sub_type=pb.CommandSubscribe.Exclusive, consumer_id=1,
        request_id=2, initial_position=pb.CommandSubscribe.Earliest)))
    _next_of(s, pb.BaseCommand.SUCCESS)
    s.sendall(frames.encode(pb.CommandFlow(consumer_id=1, message_permits=1000)))
    got = []
    while len(got) < count:
        frame = _read_frame(s)
        if frame.type == pb.BaseCommand.MESSAGE:
            got.append(frame)
    s.close()
    return got


def test_every_pulsar_message_field_survives_both_protocols(magnetar, client):
    """The producer's publish time, a null value, null and base64 keys, deliver_at_time,
    event time, properties, keys: kept for a Pulsar consumer and a Magnetar one, from a
    single message and from a compressed batch."""
    import magnetar as mclient

    topic = new_topic("fidelity")
    s, name = _raw_producer(magnetar, topic)
    single = pb.MessageMetadata(
        producer_name=name, sequence_id=0, publish_time=1_600_000_000_123, partition_key="a2V5",
        partition_key_b64_encoded=True, ordering_key=b"ok", event_time=77, null_value=True,
        deliver_at_time=1_900_000_000_000, properties=[pb.KeyValue(key="p", value="1")])
    s.sendall(frames.encode(pb.CommandSend(producer_id=1, sequence_id=0), single, b""))
    assert _next_of(s, pb.BaseCommand.SEND_RECEIPT).sequence_id == 0
    body = b""
    for meta, data in ((pb.SingleMessageMetadata(payload_size=2, null_partition_key=True, event_time=5), b"b0"),
                       (pb.SingleMessageMetadata(payload_size=2, partition_key="k1", ordering_key=b"o1",
                                                 properties=[pb.KeyValue(key="q", value="2")]), b"b1")):
        raw = meta.SerializeToString()
        body += struct.pack(">I", len(raw)) + raw + data
    batch = pb.MessageMetadata(producer_name=name, sequence_id=1, publish_time=1_600_000_000_456,
                               num_messages_in_batch=2, highest_sequence_id=2,
                               compression=pb.ZSTD, uncompressed_size=len(body))
    from magnetar_protocol.pulsar.compression import compress
    s.sendall(frames.encode(pb.CommandSend(producer_id=1, sequence_id=1, num_messages=2, highest_sequence_id=2),
                            batch, compress(pb.ZSTD, body)))
    assert _next_of(s, pb.BaseCommand.SEND_RECEIPT).sequence_id == 1
    s.close()

    # The wheel.
    wheel = receive_all(client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest), 3)
    assert [m.data() for m in wheel] == [b"", b"b0", b"b1"]
    assert [m.publish_timestamp() for m in wheel] == [1_600_000_000_123, 1_600_000_000_456, 1_600_000_000_456]
    assert [m.partition_key() for m in wheel] == ["a2V5", "", "k1"]
    assert [m.ordering_key() for m in wheel] == ["ok", "", "o1"]
    assert [m.event_timestamp() for m in wheel] == [77, 5, 0]
    assert [m.properties() for m in wheel] == [{"p": "1"}, {}, {"q": "2"}]
    # What the wheel does not show, at the frame level.
    first, batched = _raw_messages(magnetar, topic, 2)
    assert first.metadata.null_value and first.metadata.partition_key_b64_encoded
    assert first.metadata.deliver_at_time == 1_900_000_000_000
    assert first.metadata.publish_time == 1_600_000_000_123 and batched.metadata.publish_time == 1_600_000_000_456
    assert batched.metadata.num_messages_in_batch == 2
    # Stored as sent: it comes back compressed as it went (docs/pulsar-protocol.md).
    assert batched.metadata.compression == pb.ZSTD
    from magnetar_protocol.pulsar.compression import decompress
    body = decompress(pb.ZSTD, batched.payload, batched.metadata.uncompressed_size)
    (size,) = struct.unpack(">I", body[:4])
    assert pb.SingleMessageMetadata.FromString(body[4:4 + size]).null_partition_key

    # Magnetar's client.
    m = mclient.Client(",".join(magnetar.broker_urls))
    try:
        consumer = m.subscribe(topic, "m2", initial_position=mclient.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(3)]
        assert [g.data() for g in got] == [b"", b"b0", b"b1"]
        assert [g.has_null_value() for g in got] == [True, False, False]
        assert [g.has_null_partition_key() for g in got] == [False, True, False]
        assert [g.partition_key_b64_encoded() for g in got] == [True, False, False]
        assert [g.deliver_at_time() for g in got] == [1_900_000_000_000, 0, 0]
        assert [g.publish_timestamp() for g in got] == [1_600_000_000_123, 1_600_000_000_456, 1_600_000_000_456]
        assert [g.partition_key() for g in got] == ["a2V5", "", "k1"]
        assert [g.ordering_key() for g in got] == [b"ok", b"", b"o1"]
        assert [g.event_timestamp() for g in got] == [77, 5, 0]
        assert [g.properties() for g in got] == [{"p": "1"}, {}, {"q": "2"}]

        # The wheel's own deliver_after and publish time reach Magnetar's client.
        other = new_topic("fidelity-wheel")
        producer = client.create_producer(other, batching_enabled=False)
        producer.send(b"later", deliver_after=timedelta(hours=1), event_timestamp=9)
        wheel_got = client.subscribe(other, "w", consumer_type=pulsar.ConsumerType.Exclusive,
                                     initial_position=pulsar.InitialPosition.Earliest).receive(TIMEOUT_MS)
        mine = m.subscribe(other, "m", initial_position=mclient.InitialPosition.Earliest).receive(TIMEOUT_MS)
        assert mine.data() == b"later" and mine.event_timestamp() == 9
        assert mine.deliver_at_time() > mine.publish_timestamp() + 3_000_000
        assert mine.publish_timestamp() == wheel_got.publish_timestamp()
    finally:
        m.close()


@pytest.mark.parametrize("lie", ["garbage", "short", "long", "huge"])
def test_a_send_that_does_not_decompress_gets_send_error(magnetar, lie):
    from magnetar_protocol.pulsar.compression import compress

    topic = new_topic(f"undecompressable-{lie}")
    s, name = _raw_producer(magnetar, topic)
    body = b"hello compressed world " * 20
    payload, size = {"garbage": (b"\x00\xff not lz4 at all " * 4, len(body)),
                     "short": (compress(pb.LZ4, body), len(body) - 7),
                     "long": (compress(pb.LZ4, body), len(body) + 7),
                     "huge": (compress(pb.LZ4, body), 2**31)}[lie]
    s.sendall(frames.encode(pb.CommandSend(producer_id=1, sequence_id=0), pb.MessageMetadata(
        producer_name=name, sequence_id=0, publish_time=1, compression=pb.LZ4, uncompressed_size=size), payload))
    refused = _next_of(s, pb.BaseCommand.SEND_ERROR)
    assert (refused.sequence_id, refused.error) == (0, pb.NotAllowedError) and "LZ4" in refused.message
    if lie == "huge":   # refused from the claimed size, before allocating it
        assert "over the limit" in refused.message
    # The connection goes on; the good message is the topic's first and only one.
    s.sendall(frames.encode(pb.CommandSend(producer_id=1, sequence_id=1), pb.MessageMetadata(
        producer_name=name, sequence_id=1, publish_time=1, compression=pb.LZ4, uncompressed_size=len(body)),
        compress(pb.LZ4, body)))
    receipt = _next_of(s, pb.BaseCommand.SEND_RECEIPT)
    assert receipt.sequence_id == 1 and receipt.message_id.entry_id == 0
    s.close()
    assert magnetar.services["broker-0"].alive and magnetar.services["broker-1"].alive


# ---------------------------------------------------------------- bad frames


def _raw(magnetar, url: str = "") -> socket.socket:
    host, port = (url or magnetar.pulsar_service_url).removeprefix("pulsar://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(frames.encode(pb.CommandConnect(client_version="raw-test", protocol_version=20)))
    assert _read_frame(s).type == pb.BaseCommand.CONNECTED
    return s


def _read_frame(s: socket.socket):
    size = struct.unpack(">I", _read_exactly(s, 4))[0]
    return frames.decode_frame(struct.pack(">I", size) + _read_exactly(s, size))


def _read_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def test_bad_frames_get_errors_and_the_broker_serves_on(magnetar, client):
    # An unknown command type: ERROR, and the connection goes on.
    s = _raw(magnetar)
    unknown = pb.BaseCommand(type=pb.BaseCommand.PING).SerializeToString().replace(b"\x08\x12", b"\x08\x7f")
    s.sendall(struct.pack(">II", len(unknown) + 4, len(unknown)) + unknown)
    assert _read_frame(s).type == pb.BaseCommand.ERROR
    s.sendall(frames.encode(pb.CommandPing()))
    assert _read_frame(s).type == pb.BaseCommand.PONG
    # A SEND with a wrong checksum: SEND_ERROR ChecksumError, and the connection goes on.
    good = frames.encode(pb.CommandSend(producer_id=1, sequence_id=7), pb.MessageMetadata(
        producer_name="x", sequence_id=7, publish_time=1), b"payload")
    s.sendall(good[:-1] + bytes([good[-1] ^ 1]))
    answer = _read_frame(s)
    assert answer.type == pb.BaseCommand.SEND_ERROR and answer.body.error == pb.ChecksumError
    s.sendall(frames.encode(pb.CommandPing()))
    assert _read_frame(s).type == pb.BaseCommand.PONG
    # Oversize: refused from the size prefix, ERROR, then closed.
    s.sendall(struct.pack(">I", 64 * 1024 * 1024))
    assert _read_frame(s).type == pb.BaseCommand.ERROR
    assert s.recv(1) == b""
    s.close()
    # Truncated: the client goes away inside a frame.
    t = _raw(magnetar)
    t.sendall(frames.encode(pb.CommandPing())[:-1])
    t.close()
    # Nothing before CONNECT.
    u = socket.create_connection(magnetar.pulsar_service_url.removeprefix("pulsar://").split(":"), timeout=10) \
        if False else _unconnected(magnetar)
    u.sendall(frames.encode(pb.CommandPing()))
    assert _read_frame(u).type == pb.BaseCommand.ERROR
    u.close()
    # The broker still serves everyone else.
    topic = new_topic("after-bad")
    client.create_producer(topic).send(b"fine")
    assert magnetar.services["broker-0"].alive


def _unconnected(magnetar) -> socket.socket:
    host, port = magnetar.pulsar_service_url.removeprefix("pulsar://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


# ---------------------------------------------------------------- authentication


AUTH_SECRET = "pulsar-test-secret-of-at-least-32-bytes"


def test_token_auth_maps_onto_magnetar_roles(cluster_factory):
    import jwt

    auth = cluster_factory(brokers=1, coordinators=0, admin=False, registry=False, env={
        "MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": AUTH_SECRET,
        "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"})
    url = auth.pulsar_service_url
    topic = new_topic("auth")

    def token(role: str, secret: str = AUTH_SECRET) -> pulsar.AuthenticationToken:
        return pulsar.AuthenticationToken(jwt.encode({"sub": role}, secret, algorithm="HS256"))

    admin = pulsar_client(url, authentication=token("admin"))
    try:
        admin.create_producer(topic).send(b"as admin")
    finally:
        admin.close()
    for options, _why in (({}, "no token"), ({"authentication": token("admin", "x" * 40)}, "a forged token")):
        # The refusal itself, not TimeOut after the wheel's retries (issue 24): with
        # Pulsar's own answer to a refused CONNECT this wheel retried for the whole
        # operation timeout and raised pulsar.Timeout.
        c = pulsar_client(url, operation_timeout_seconds=30, **options)
        try:
            with pytest.raises(pulsar.AuthenticationError):
                c.create_producer(topic)
            with pytest.raises(pulsar.AuthenticationError):
                c.subscribe(topic, "s")
        finally:
            c.close()
    nobody = pulsar_client(url, operation_timeout_seconds=3, authentication=token("nobody"))
    try:
        with pytest.raises(pulsar.AuthorizationError):   # authenticated, but no grant
            nobody.create_producer(topic)
    finally:
        nobody.close()
    log = auth.log_tail("broker-0", 200)
    assert "CONNECT refused: authentication is required" in log
    assert "CONNECT refused: the bearer token was refused" in log


def _drain_keys(consumers, key_of) -> list[set]:
    keys_of = []
    for consumer in consumers:
        got = []
        while True:
            try:
                got.append(consumer.receive(timeout_millis=1000))
            except pulsar.Timeout:
                break
        keys_of.append({key_of(m) for m in got})
    return keys_of


def test_key_shared_keeps_each_key_on_one_consumer(magnetar, client):
    topic = new_topic("keyshared")
    consumers = [client.subscribe(topic, "k", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}")
                 for i in range(2)]
    # Four keys the broker's ring gives each consumer (computed from its consumers' ids:
    # eight random keys all went to one consumer in ~1% of runs).
    mine = keys_for_each_consumer(magnetar, topic, "k", 4)
    keys = mine["c0"] + mine["c1"]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"m{i}".encode(), partition_key=keys[i % 8])
    assert _drain_keys(consumers, lambda m: m.partition_key()) == [set(mine["c0"]), set(mine["c1"])]


def test_key_shared_dispatches_by_ordering_key_before_partition_key(magnetar, client):
    topic = new_topic("keyshared-ordering")
    consumers = [client.subscribe(topic, "k", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"c{i}")
                 for i in range(2)]
    mine = keys_for_each_consumer(magnetar, topic, "k", 4, prefix="order-")
    keys = mine["c0"] + mine["c1"]
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):   # one partition key: by it alone a single consumer would get all
        producer.send(f"m{i}".encode(), partition_key="same", ordering_key=keys[i % 8])
    got = _drain_keys(consumers, lambda m: m.ordering_key())
    assert got == [set(mine["c0"]), set(mine["c1"])]


def test_nack_redelivers_just_that_message(client):
    topic = new_topic("nack-one")
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(f"m{i}".encode())
    got = receive_all(consumer, 4)
    consumer.negative_acknowledge(got[1])     # the others stay unacknowledged, not redelivered
    again = consumer.receive(timeout_millis=TIMEOUT_MS)
    assert (again.data(), again.redelivery_count()) == (b"m1", 1)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1000)


def test_redeliver_one_message_of_a_batch_by_its_index(magnetar, client):
    # Frame level: the wheel nacks a batched message as its whole batch.
    topic = new_topic("redeliver-index")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=3,
                                      batching_max_publish_delay_ms=1000)
    for i in range(3):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    s = _owner_socket(magnetar, topic)
    s.sendall(frames.encode(pb.CommandSubscribe(
        topic=topic, subscription="s", sub_type=pb.CommandSubscribe.Shared, consumer_id=1, request_id=2,
        initial_position=pb.CommandSubscribe.Earliest)))
    _next_of(s, pb.BaseCommand.SUCCESS)
    s.sendall(frames.encode(pb.CommandFlow(consumer_id=1, message_permits=100)))
    first = _next_of(s, pb.BaseCommand.MESSAGE)
    assert not first.ack_set and first.redelivery_count == 0
    s.sendall(frames.encode(pb.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=[
        pb.MessageIdData(ledger_id=first.message_id.ledger_id, entry_id=first.message_id.entry_id, batch_index=1)])))
    again = _next_of(s, pb.BaseCommand.MESSAGE)
    assert again.message_id.entry_id == first.message_id.entry_id and again.redelivery_count == 1
    assert list(again.ack_set) == [0b010]      # just message 1 is due again
    s.close()


def test_a_send_over_the_size_limit_gets_send_error(magnetar):
    topic = new_topic("big")
    s = _raw(magnetar)
    s.sendall(frames.encode(pb.CommandLookupTopic(topic=topic, request_id=1)))
    found = _read_frame(s)
    s.close()
    assert found.type == pb.BaseCommand.LOOKUP_RESPONSE and found.body.response == found.body.Connect
    s = _raw(magnetar, found.body.broker_service_url)     # the owner
    s.sendall(frames.encode(pb.CommandProducer(topic=topic, producer_id=1, request_id=1)))
    created = _read_frame(s)
    assert created.type == pb.BaseCommand.PRODUCER_SUCCESS
    big = b"x" * (5 * 1024 * 1024 + 1)     # over MAGNETAR_MAX_MESSAGE_SIZE, inside the frame limit
    s.sendall(frames.encode(pb.CommandSend(producer_id=1, sequence_id=0), pb.MessageMetadata(
        producer_name=created.body.producer_name, sequence_id=0, publish_time=1), big))
    answer = _read_frame(s)
    assert answer.type == pb.BaseCommand.SEND_ERROR and answer.body.error == pb.NotAllowedError
    assert "5242880" in answer.body.message or "too" in answer.body.message.lower()
    s.sendall(frames.encode(pb.CommandSend(producer_id=1, sequence_id=1), pb.MessageMetadata(
        producer_name=created.body.producer_name, sequence_id=1, publish_time=1), b"small"))
    assert _read_frame(s).type == pb.BaseCommand.SEND_RECEIPT
    s.close()


def _owner_socket(magnetar, topic: str) -> socket.socket:
    s = _raw(magnetar)
    s.sendall(frames.encode(pb.CommandLookupTopic(topic=topic, request_id=1)))
    found = _read_frame(s)
    s.close()
    assert found.type == pb.BaseCommand.LOOKUP_RESPONSE and found.body.response == found.body.Connect
    return _raw(magnetar, found.body.broker_service_url)


def _next_of(s: socket.socket, kind: int):
    while (frame := _read_frame(s)).type != kind:
        pass
    return frame.body


def test_failover_pushes_active_consumer_change(magnetar):
    # The wheel has no consumer event listener in Python: two raw connections instead.
    topic = new_topic("active")
    a, b = _owner_socket(magnetar, topic), _owner_socket(magnetar, topic)
    for s, name in ((a, "a"), (b, "b")):
        s.sendall(frames.encode(pb.CommandSubscribe(
            topic=topic, subscription="f", sub_type=pb.CommandSubscribe.Failover, consumer_id=1, request_id=2,
            consumer_name=name)))
        _next_of(s, pb.BaseCommand.SUCCESS)
    assert _next_of(a, pb.BaseCommand.ACTIVE_CONSUMER_CHANGE).is_active          # "a" sorts first
    assert not _next_of(b, pb.BaseCommand.ACTIVE_CONSUMER_CHANGE).is_active
    a.sendall(frames.encode(pb.CommandCloseConsumer(consumer_id=1, request_id=3)))
    assert _next_of(b, pb.BaseCommand.ACTIVE_CONSUMER_CHANGE).is_active          # "b" takes over
    a.close()
    b.close()


@pytest.mark.parametrize("codec", ["LZ4", "ZLib", "ZSTD", "SNAPPY"])
def test_compressed_batches_are_readable_by_both_clients(magnetar, client, codec):
    import magnetar as mclient

    topic = new_topic(f"codec-{codec}")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                      compression_type=getattr(pulsar.CompressionType, codec))
    payloads = [f"{codec} message {i} ".encode() * 20 for i in range(50)]
    for data in payloads:
        producer.send_async(data, None)
    producer.flush()
    alone = client.create_producer(topic, batching_enabled=False,
                                   compression_type=getattr(pulsar.CompressionType, codec))
    payloads.append(f"{codec} unbatched ".encode() * 20)
    alone.send(payloads[-1])
    m = mclient.Client(",".join(magnetar.broker_urls))
    try:
        m_consumer = m.subscribe(topic, "m", initial_position=mclient.InitialPosition.Earliest)
        assert [m_consumer.receive(timeout_millis=TIMEOUT_MS).data() for _ in payloads] == payloads
    finally:
        m.close()
    p_consumer = client.subscribe(topic, "p", initial_position=pulsar.InitialPosition.Earliest)
    assert [msg.data() for msg in receive_all(p_consumer, len(payloads))] == payloads


def test_a_pattern_subscription_finds_the_namespace_topics(client):
    import re

    prefix = f"pulsar-pattern{next(_topics)}"
    producers = [client.create_producer(f"persistent://public/default/{prefix}-{name}", batching_enabled=False)
                 for name in ("a", "b")]
    consumer = client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "p",
                                initial_position=pulsar.InitialPosition.Earliest)   # GET_TOPICS_OF_NAMESPACE
    for p, name in zip(producers, ("a", "b")):
        p.send(name.encode())
    assert sorted(m.data() for m in receive_all(consumer, 2)) == [b"a", b"b"]


def test_bad_requests_get_typed_errors(magnetar):
    s = _raw(magnetar)
    s.sendall(frames.encode(pb.CommandLookupTopic(topic="persistent://public/default/bad..name", request_id=1)))
    looked = _next_of(s, pb.BaseCommand.LOOKUP_RESPONSE)
    assert looked.response == looked.Failed and looked.error == pb.InvalidTopicName
    s.sendall(frames.encode(pb.CommandPartitionedTopicMetadata(topic="not a topic", request_id=2)))
    meta = _next_of(s, pb.BaseCommand.PARTITIONED_METADATA_RESPONSE)
    assert meta.response == meta.Failed and meta.error == pb.InvalidTopicName
    # A SEND for a producer this connection never created: SEND_ERROR, nothing stored.
    s.sendall(frames.encode(pb.CommandSend(producer_id=99, sequence_id=5), pb.MessageMetadata(
        producer_name="ghost", sequence_id=5, publish_time=1), b"x"))
    refused = _next_of(s, pb.BaseCommand.SEND_ERROR)
    assert (refused.producer_id, refused.sequence_id, refused.error) == (99, 5, pb.NotAllowedError)
    # An ACK asking for an answer, for a consumer that does not exist here.
    s.sendall(frames.encode(pb.CommandAck(consumer_id=42, ack_type=pb.CommandAck.Individual, request_id=3,
                                          message_id=[pb.MessageIdData(ledger_id=0, entry_id=0)])))
    acked = _next_of(s, pb.BaseCommand.ACK_RESPONSE)
    assert acked.request_id == 3 and acked.error == pb.ConsumerNotFound
    s.sendall(frames.encode(pb.CommandSeek(consumer_id=42, request_id=4, message_publish_time=1)))
    error = _next_of(s, pb.BaseCommand.ERROR)
    assert (error.request_id, error.error) == (4, pb.ConsumerNotFound)
    s.close()


# ---------------------------------------------------------------- stats and end of topic


def _admin(magnetar, method: str, path: str):
    req = urllib.request.Request(magnetar.admin_url + path, method=method, data=b"" if method == "POST" else None,
                                 headers={"accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def test_deliveries_to_pulsar_consumers_count_in_the_topic_stats(magnetar, client):
    name = f"pulsar-stats-{next(_topics)}"
    topic = f"persistent://public/default/{name}"
    stats_path = f"/admin/v2/persistent/public/default/{name}/stats"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"stat-{i}".encode())
    receive_all(consumer, 3)
    live = wait_until(lambda: (lambda st: st if st["msgOutCounter"] == 3 else None)(
        _admin(magnetar, "GET", stats_path)), 15, "3 deliveries counted")
    assert live["bytesOutCounter"] >= 3 * len(b"stat-0") and live["msgRateOut"] > 0
    assert live["subscriptions"]["s"]["msgOutCounter"] == 3
    consumer.close()
    # A reader's deliveries count too, and both stay counted once their consumers closed.
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(TIMEOUT_MS).data() for _ in range(3)] == [f"stat-{i}".encode() for i in range(3)]
    reader.close()
    closed = wait_until(lambda: (lambda st: st if st["msgOutCounter"] == 6 else None)(
        _admin(magnetar, "GET", stats_path)), 15,
        "6 deliveries counted after the consumers closed")
    assert closed["bytesOutCounter"] >= 6 * len(b"stat-0")
    assert closed["subscriptions"]["s"]["msgOutCounter"] == 3


def _terminated_topic(magnetar, client, count: int) -> str:
    name = f"pulsar-terminated-{next(_topics)}"
    topic = f"persistent://public/default/{name}"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"t{i}".encode())
    _admin(magnetar, "POST", f"/admin/v2/persistent/public/default/{name}/terminate")
    return topic


def test_a_consumer_that_consumed_a_terminated_topic_is_told_its_end(magnetar, client):
    topic = _terminated_topic(magnetar, client, 2)
    s = _owner_socket(magnetar, topic)
    s.sendall(frames.encode(pb.CommandSubscribe(topic=topic, subscription="s", sub_type=pb.CommandSubscribe.Shared,
                                                consumer_id=1, request_id=2,
                                                initial_position=pb.CommandSubscribe.Earliest)))
    _next_of(s, pb.BaseCommand.SUCCESS)
    s.sendall(frames.encode(pb.CommandFlow(consumer_id=1, message_permits=100)))
    got = []
    while (frame := _read_frame(s)).type != pb.BaseCommand.REACHED_END_OF_TOPIC:
        if frame.type == pb.BaseCommand.MESSAGE:
            got.append(frame.payload)
    assert frame.body.consumer_id == 1 and got == [b"t0", b"t1"]   # told after everything
    s.close()


def test_the_wheel_keeps_its_connection_at_the_end_of_a_terminated_topic(magnetar, client):
    # Its C++ core drops the connection on REACHED_END_OF_TOPIC (and would get its
    # unacknowledged messages again): it is not told, and receive waits at the end.
    topic = _terminated_topic(magnetar, client, 3)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(consumer, 3)] == [b"t0", b"t1", b"t2"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=1500)   # nothing again: the connection held
    assert consumer.is_connected()
