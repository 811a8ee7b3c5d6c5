"""Issue 29's Pulsar features with the real `pulsar-client` wheel and Magnetar's client
against one real Magnetar: chunked messages both ways, end-to-end encryption carried
through the broker, topic compaction with `read_compacted`.

The brokers' message limit is 64 KiB so a chunked message is a few hundred KB.  One
cluster for the module; each test uses topics (and namespaces) of its own.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import urllib.request

import pulsar
import pulsar.schema
import pytest

import magnetar
import magnetar.schema as mschema
from magnetar.admin_cli import run as admin_cli
from magnetar_protocol import magnetar_pb2 as pb_magnetar
from magnetar_protocol import pulsar_api_pb2 as pb
from tests.e2e.pulsar_wire import Wire, coordinators
from tests.waiting import wait_until

MAX_MESSAGE = 64 * 1024
TIMEOUT_MS = 10_000

pytestmark = [pytest.mark.shared_cluster,
              pytest.mark.cluster(brokers=1, registry=False,
                                  env={"MAGNETAR_MAX_MESSAGE_SIZE": str(MAX_MESSAGE)})]

_names = itertools.count()


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/features-{prefix}-{next(_names)}"


def big(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that do not repeat with the chunk size."""
    block = bytes((i * 31 + seed) % 251 for i in range(251))
    return (block * (size // 251 + 1))[:size]


def admin(cluster, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(cluster.admin_url + path, method=method, data=data,
                                 headers={"accept": "application/json", "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def backlog(cluster, topic: str, subscription: str) -> int:
    name = topic.removeprefix("persistent://")
    return admin(cluster, "GET", f"/admin/v2/persistent/{name}/stats")["subscriptions"][subscription]["msgBacklog"]


# ---------------------------------------------------------------- chunking


def test_a_wheel_chunked_message_is_stored_and_reassembled_by_the_wheel(cluster, wheel):
    topic = new_topic("chunks-wheel")
    consumer = wheel.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = wheel.create_producer(topic, chunking_enabled=True, batching_enabled=False,
                                     send_timeout_millis=TIMEOUT_MS)
    data = big(5 * MAX_MESSAGE + 123)
    # The send completes: before, each chunk met SEND_ERROR and the wheel reconnected
    # ~700 times a minute, send() never returning (so wait with a deadline here).
    results = []
    producer.send_async(data, lambda result, msg_id: results.append(result),
                        properties={"k": "v"}, partition_key="key-1")
    wait_until(lambda: results, 30, "the chunked message's send to complete")
    assert results == [pulsar.Result.Ok]
    producer.send(b"small after")
    got = consumer.receive(TIMEOUT_MS)
    assert got.data() == data
    assert (got.properties(), got.partition_key()) == ({"k": "v"}, "key-1")
    assert consumer.receive(TIMEOUT_MS).data() == b"small after"
    consumer.acknowledge(got)
    # Acknowledging the message acknowledged every chunk (the wheel acks each).
    wait_until(lambda: backlog(cluster, topic, "s") == 1, 15, "the chunks acknowledged")


def test_chunked_messages_cross_between_the_wheel_and_magnetars_client(cluster, wheel, client):
    to_magnetar, to_wheel = new_topic("chunks-w2m"), new_topic("chunks-m2w")
    data = big(3 * MAX_MESSAGE + 7, seed=1)
    # The wheel's chunks, reassembled by Magnetar's client; its ack acks every chunk.
    m_consumer = client.subscribe(to_magnetar, "s", initial_position=magnetar.InitialPosition.Earliest)
    w_producer = wheel.create_producer(to_magnetar, chunking_enabled=True, batching_enabled=False)
    w_producer.send(data, properties={"from": "wheel"}, partition_key="pk")
    got = m_consumer.receive(TIMEOUT_MS)
    assert (got.data(), got.properties(), got.partition_key()) == (data, {"from": "wheel"}, "pk")
    m_consumer.acknowledge(got)
    wait_until(lambda: backlog(cluster, to_magnetar, "s") == 0, 15, "every chunk acknowledged")
    # Magnetar's producer chunks in Pulsar's format: the wheel and Magnetar's client
    # both put it back together.
    w_consumer = wheel.subscribe(to_wheel, "w", initial_position=pulsar.InitialPosition.Earliest)
    m_reader = client.create_reader(to_wheel, magnetar.MessageId.earliest)
    m_producer = client.create_producer(to_wheel, chunking_enabled=True, batching_enabled=False)
    sent = m_producer.send(data, properties={"from": "magnetar"}, partition_key="pk2")
    m_producer.send(b"small")
    assert sent.entry_id() >= 3   # the last chunk's entry
    got = w_consumer.receive(TIMEOUT_MS)
    assert (got.data(), got.properties(), got.partition_key()) == (data, {"from": "magnetar"}, "pk2")
    assert w_consumer.receive(TIMEOUT_MS).data() == b"small"
    w_consumer.acknowledge(got)
    read = m_reader.read_next(TIMEOUT_MS)
    assert (read.data(), read.properties()) == (data, {"from": "magnetar"})
    assert m_reader.read_next(TIMEOUT_MS).data() == b"small"


def test_a_chunked_message_with_a_schema_keeps_its_schema_version(wheel, client):
    """A Magnetar producer's chunked Avro record (issue 29's schemas): both clients put it
    back together and read it with its schema version (the chunks' metadata carries it)."""
    topic = new_topic("chunks-schema")
    text = big(2 * MAX_MESSAGE, seed=2).hex()
    record = type("Doc", (mschema.Record,), {"body": mschema.String(), "n": mschema.Integer()})
    wheel_record = type("Doc", (pulsar.schema.Record,), {"body": pulsar.schema.String(),
                                                         "n": pulsar.schema.Integer()})
    w_consumer = wheel.subscribe(topic, "w", schema=pulsar.schema.AvroSchema(wheel_record),
                                 initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, schema=mschema.AvroSchema(record), chunking_enabled=True,
                                      batching_enabled=False)
    producer.send(record(body=text, n=7))
    got = w_consumer.receive(TIMEOUT_MS)
    assert (got.value().body, got.value().n, got.schema_version().encode()) == (text, 7, b"\x00" * 8)
    reader = client.create_reader(topic, magnetar.MessageId.earliest, schema=mschema.AvroSchema(record))
    read = reader.read_next(TIMEOUT_MS)
    assert (read.value(), read.int_schema_version()) == (record(body=text, n=7), 0)


def test_a_message_over_the_limit_without_chunking_is_refused(client):
    producer = client.create_producer(new_topic("chunks-off"))
    with pytest.raises(magnetar.MessageTooBig):
        producer.send(big(MAX_MESSAGE + 1))
    with pytest.raises(ValueError, match="batching_enabled=False"):
        client.create_producer(new_topic("chunks-bad"), chunking_enabled=True)


def test_incomplete_chunks_expire_on_magnetars_consumer(cluster, client):
    topic = new_topic("chunks-expire")
    # Two of three chunks, sent frame by frame (what a producer that died mid-message
    # leaves), then a whole message.
    wire = Wire(cluster.pulsar_urls[0])
    try:
        name = wire.producer(topic, 1, name="dies")
        for chunk_id in range(2):
            metadata = pb.MessageMetadata(producer_name=name, sequence_id=0, publish_time=1, uuid=f"{name}-0",
                                          chunk_id=chunk_id, num_chunks_from_msg=3, total_chunk_msg_size=30)
            wire.send(pb.CommandSend(producer_id=1, sequence_id=0, num_messages=1), metadata, b"x" * 10)
            wire.wait_for(lambda f: f.type == pb.BaseCommand.SEND_RECEIPT)
        wire.publish(1, name, 1, b"whole")
    finally:
        wire.close()
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest,
                                expire_time_of_incomplete_chunked_message_ms=300)
    assert consumer.receive(TIMEOUT_MS).data() == b"whole"
    # The two chunks were dropped and acknowledged once they expired.
    wait_until(lambda: backlog(cluster, topic, "s") == 1, 15, "the expired chunks acknowledged")


# ---------------------------------------------------------------- encryption


@pytest.fixture(scope="module")
def rsa_keys(tmp_path_factory):
    """An RSA key pair in PEM files, as a Pulsar application keeps its keys."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    folder = tmp_path_factory.mktemp("keys")
    public, private = folder / "public.pem", folder / "private.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return pulsar.CryptoKeyReader(str(public), str(private))


def stored_payloads(cluster, topic: str) -> list[bytes]:
    return [r[0] for r in cluster.query(
        "SELECT e.payload FROM entries e JOIN topics t USING (topic_id) WHERE t.topic = $1 ORDER BY e.entry_id", topic)]


@pytest.mark.parametrize("batched", [False, True])
def test_encrypted_messages_pass_through_between_two_wheel_clients(cluster, rsa_keys, batched, client):
    topic = new_topic("encrypted")
    sender = pulsar.Client(cluster.pulsar_service_url, operation_timeout_seconds=10)
    receiver = pulsar.Client(cluster.pulsar_service_url, operation_timeout_seconds=10)
    try:
        consumer = receiver.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest,
                                      crypto_key_reader=rsa_keys)
        producer = sender.create_producer(topic, encryption_key="app-key", crypto_key_reader=rsa_keys,
                                          batching_enabled=batched, batching_max_messages=4,
                                          compression_type=pulsar.CompressionType.LZ4)
        for i in range(6):
            producer.send_async(f"secret-{i}".encode() * 8, None, properties={"i": str(i)},
                                partition_key=f"k{i}")
        producer.flush()
        got = [consumer.receive(TIMEOUT_MS) for _ in range(6)]
        assert [m.data() for m in got] == [f"secret-{i}".encode() * 8 for i in range(6)]
        assert [m.properties() for m in got] == [{"i": str(i)} for i in range(6)]
        for m in got:
            consumer.acknowledge(m)
        wait_until(lambda: backlog(cluster, topic, "s") == 0, 15, "every message acknowledged")
        # The broker stored ciphertext: it never saw the data key.
        assert not any(b"secret-" in p for p in stored_payloads(cluster, topic))
    finally:
        sender.close()
        receiver.close()
    # Magnetar's client hands an encrypted message over as it is, with how it was
    # encrypted (the data key under "app-key", the cipher's IV): the wheel's metadata
    # reached it unchanged.
    reader = client.create_reader(topic, magnetar.MessageId.earliest)
    first = reader.read_next(TIMEOUT_MS)
    context = first.encryption_context()
    assert context is not None and list(context.keys) == ["app-key"] and len(context.param) == 12
    assert context.compression == "LZ4" and b"secret-" not in first.data()
    assert context.batch_size == (4 if batched else None)


def test_an_encrypted_message_travels_in_a_transaction_with_others(cluster, wheel, rsa_keys):
    """A Java application's encrypted transactional send (the wheel has no transactions,
    so a real encrypted entry is sent frame by frame): committed, it reaches a wheel
    consumer that decrypts it, next to a plain message of the same transaction (two
    frames of the transaction's one entry)."""
    source, target = new_topic("enc-src"), new_topic("enc-txn")
    producer = wheel.create_producer(source, encryption_key="app-key", crypto_key_reader=rsa_keys)
    producer.send(b"sealed in a transaction", properties={"p": "1"})
    [envelope] = pb_magnetar.MessageBatch.FromString(stored_payloads(cluster, source)[0]).messages
    metadata = pb.MessageMetadata.FromString(envelope.pulsar_metadata)
    wire = Wire(cluster.pulsar_service_url)
    try:
        [tc] = coordinators(wire).values()
        txn = tc.new_txn()
        name = wire.producer(target, 1, name="java-app")
        metadata.producer_name, metadata.sequence_id = name, 0
        send = pb.CommandSend(producer_id=1, sequence_id=0, num_messages=1, txnid_most_bits=txn[0],
                              txnid_least_bits=txn[1])
        wire.send(send, metadata, envelope.payload)
        wire.wait_for(lambda f: f.type == pb.BaseCommand.SEND_RECEIPT)
        wire.publish(1, name, 1, b"plain, same transaction", txn=txn)
        tc.end_txn(txn, commit=True)
    finally:
        wire.close()
    consumer = wheel.subscribe(target, "s", initial_position=pulsar.InitialPosition.Earliest,
                               crypto_key_reader=rsa_keys)
    got = [consumer.receive(TIMEOUT_MS) for _ in range(2)]
    assert [m.data() for m in got] == [b"sealed in a transaction", b"plain, same transaction"]
    assert got[0].properties() == {"p": "1"}
    for m in got:
        consumer.acknowledge(m)
    wait_until(lambda: backlog(cluster, target, "s") == 0, 15, "the transaction's entry acknowledged")


# ---------------------------------------------------------------- compaction


def cli(cluster, *argv: str) -> tuple[int, str]:
    """``magnetar-admin`` in this process (test_cli.py proves the console script)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = admin_cli(["--admin-url", cluster.admin_url, *argv])
    return code, out.getvalue()


def compact_and_wait(cluster, topic: str) -> None:
    code, _ = cli(cluster, "topics", "compact", topic)
    assert code == 0
    wait_until(lambda: cli(cluster, "topics", "compaction-status", topic)[1].strip() == "SUCCESS", 30,
               "the compaction to succeed", explain=lambda: cli(cluster, "topics", "compaction-status", topic))


def test_compaction_with_tombstones_read_compacted_by_a_wheel_reader_and_consumer(cluster, wheel, client):
    topic = new_topic("compacted")
    producer = wheel.create_producer(topic, batching_enabled=True, batching_max_messages=3,
                                     batching_max_publish_delay_ms=50)
    for key, value in [("a", b"a1"), ("b", b"b1"), ("c", b"c1"), ("a", b"a2"), ("b", b""), (None, b"keyless"),
                       ("c", b"c2")]:
        if key is None:
            producer.send_async(value, None)
        else:
            producer.send_async(value, None, partition_key=key)   # an empty value: a tombstone
    producer.flush()
    code, text = cli(cluster, "topics", "compaction-status", topic)
    assert (code, text.strip()) == (0, "NOT_RUN")
    compact_and_wait(cluster, topic)
    producer.send(b"a3", partition_key="a")   # after the horizon: the tail

    def latest(reader_or_consumer, count: int) -> list[tuple[str, bytes]]:
        read = getattr(reader_or_consumer, "read_next", None) or reader_or_consumer.receive
        return [(m.partition_key(), m.data()) for m in (read(TIMEOUT_MS) for _ in range(count))]

    want = [("a", b"a2"), ("c", b"c2"), ("a", b"a3")]
    reader = wheel.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert latest(reader, 3) == want
    assert not reader.has_message_available()
    consumer = wheel.subscribe(topic, "compacted-sub", consumer_type=pulsar.ConsumerType.Exclusive,
                               initial_position=pulsar.InitialPosition.Earliest, is_read_compacted=True)
    got = [consumer.receive(TIMEOUT_MS) for _ in range(3)]
    assert [(m.partition_key(), m.data()) for m in got] == want
    consumer.acknowledge_cumulative(got[-1])
    wait_until(lambda: backlog(cluster, topic, "compacted-sub") == 0, 15, "the cumulative ack past the view")
    # Magnetar's client reads the same view; without read_compacted, everything.
    m_reader = client.create_reader(topic, magnetar.MessageId.earliest, is_read_compacted=True)
    assert latest(m_reader, 3) == want
    plain = wheel.create_reader(topic, pulsar.MessageId.earliest)
    assert len([plain.read_next(TIMEOUT_MS) for _ in range(8)]) == 8
    # A Shared subscription cannot read the view (Pulsar's rule, refused by the broker).
    with pytest.raises(magnetar.NotAllowedError):
        client.subscribe(topic, "shared", consumer_type=magnetar.ConsumerType.Shared, is_read_compacted=True)


def test_encrypted_messages_are_not_compacted(cluster, rsa_keys):
    topic = new_topic("compacted-encrypted")
    c = pulsar.Client(cluster.pulsar_service_url, operation_timeout_seconds=10)
    try:
        producer = c.create_producer(topic, encryption_key="app-key", crypto_key_reader=rsa_keys)
        for value in (b"v1", b"v2"):
            producer.send(value, partition_key="k")
        compact_and_wait(cluster, topic)
        reader = c.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True, crypto_key_reader=rsa_keys)
        assert [reader.read_next(TIMEOUT_MS).data() for _ in range(2)] == [b"v1", b"v2"]
    finally:
        c.close()


def test_a_namespace_compaction_threshold_compacts_in_the_lifecycle_loop(cluster, client):
    namespace = f"public/compaction-{next(_names)}"
    admin(cluster, "PUT", f"/admin/v2/namespaces/{namespace}", {})
    code, _ = cli(cluster, "namespaces", "set-compaction-threshold", namespace, "--threshold", "1K")
    assert code == 0
    topic = f"persistent://{namespace}/t"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"value-{i}".encode() * 4, partition_key=f"k{i % 2}")
    # No one asked: the broker's lifecycle loop found 1 KiB past the horizon.
    wait_until(lambda: cli(cluster, "topics", "compaction-status", topic)[1].strip() == "SUCCESS", 30,
               "the threshold to start a compaction")
    reader = client.create_reader(topic, magnetar.MessageId.earliest, is_read_compacted=True)
    first = [reader.read_next(TIMEOUT_MS).data() for _ in range(2)]
    assert first == [b"value-38" * 4, b"value-39" * 4]


@pytest.mark.cluster(brokers=1, registry=False, env={"MAGNETAR_COMPACTION_PAGE_ENTRIES": "2"})
def test_a_broker_killed_mid_compaction_loses_nothing_and_the_next_run_finishes(cluster):
    """SIGKILL between two pages of a compaction's view (failpoint
    broker.compaction.after_page): the previous view and the log are whole, readers see
    them, and a compaction after the restart switches to the right view."""
    topic = new_topic("compaction-crash")
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(6):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
        compact_and_wait(cluster, topic)   # view 1: v3, v4, v5
        for i in range(6, 12):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
    finally:
        client.close()
    cluster.restart("broker-0", extra_env={"MAGNETAR_FAILPOINTS": "broker.compaction.after_page"})
    assert cli(cluster, "topics", "compact", topic)[0] == 0
    wait_until(lambda: not cluster.services["broker-0"].alive, 30, "the broker killed by its failpoint")
    half = cluster.query("SELECT generation, count(*) FROM compacted_entries GROUP BY 1 ORDER BY 1")
    assert [tuple(r) for r in half] == [(1, 3), (2, 2)]   # one page of the next view, not switched
    cluster.start("broker-0", extra_env={"MAGNETAR_FAILPOINTS": ""})
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        def read(compacted: bool, count: int) -> list[bytes]:
            reader = client.create_reader(topic, magnetar.MessageId.earliest, is_read_compacted=compacted)
            got = [reader.read_next(TIMEOUT_MS).data() for _ in range(count)]
            assert not reader.has_message_available()
            reader.close()
            return got

        # The previous view, then the whole tail; and the log, whole.
        assert read(True, 9) == [f"v{i}".encode() for i in range(3, 12)]
        assert read(False, 12) == [f"v{i}".encode() for i in range(12)]
        code, status = cli(cluster, "topics", "compaction-status", topic)
        assert status.startswith("ERROR: interrupted")
        compact_and_wait(cluster, topic)
        assert read(True, 3) == [b"v9", b"v10", b"v11"]
        assert [tuple(r) for r in cluster.query("SELECT DISTINCT generation FROM compacted_entries")] == [(2,)]
    finally:
        client.close()
