"""One-request transactions (issue 26, docs/transactions.md): with brokers that host the
coordinators, a small transaction whose partitions and subscriptions the coordinator's
broker serves keeps its sends in the client and has its acks held by the broker, and its
commit carries them, written in one SQL transaction.  Anything else spills to the
classic path, losing nothing.  Real processes and the real client throughout; the
SIGKILL tests have a cluster of their own."""

from __future__ import annotations

import asyncio
import os
import urllib.request
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

import magnetar
import magnetar.asyncio as amagnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import commit_in_background, read_all
from tests.e2e.test_coordinator_in_broker_e2e import _topics_on_each_broker, _txn_on

pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster,
              pytest.mark.cluster(brokers=2, coordinator_in_broker=True)]


def _one_request_count(cluster, broker: str) -> float:
    with urllib.request.urlopen(cluster.url(broker) + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "magnetar_txn_one_request_total")


def _registered(cluster, txn) -> int:
    """The participants the transaction registered (the classic path's rows; a
    one-request commit registers none)."""
    ids = (txn.txn_id.most_bits, txn.txn_id.least_bits)
    return cluster.query("SELECT (SELECT count(*) FROM txn_partitions WHERE coordinator_id = $1 AND txn_id = $2)"
                         " + (SELECT count(*) FROM txn_subscriptions WHERE coordinator_id = $1 AND txn_id = $2)",
                         *ids)[0][0]


def _status(cluster, txn) -> int:
    return cluster.query("SELECT status FROM transactions WHERE coordinator_id = $1 AND txn_id = $2",
                         txn.txn_id.most_bits, txn.txn_id.least_bits)[0]["status"]


def _local(cluster, client, prefix: str) -> tuple[str, str, str]:
    """(broker, a topic it owns, another topic it owns)."""
    first = _topics_on_each_broker(cluster, client, prefix + "-a")
    second = _topics_on_each_broker(cluster, client, prefix + "-b")
    broker = sorted(first)[0]
    return broker, first[broker], second[broker]


def test_a_small_consume_transform_produce_transaction_commits_in_one_request(cluster, client):
    broker, source, out = _local(cluster, client, "ctp")
    client.create_producer(source).send(b"in")
    consumer = client.subscribe(source, "ctp", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(out)
    before = _one_request_count(cluster, broker)

    message = consumer.receive(timeout_millis=10000)
    txn = _txn_on(cluster, client, broker)
    msg_id = producer.send(b"out-1", txn=txn)  # answered at once: kept for the commit
    assert read_all(client, out) == []
    consumer.acknowledge(message, txn=txn)
    txn.commit()

    assert msg_id.entry_id() == -1  # a transaction's message gets its position at the commit
    assert _one_request_count(cluster, broker) == before + 1
    assert _registered(cluster, txn) == 0 and _status(cluster, txn) == pb.TXN_COMMITTED
    assert read_all(client, out) == [b"out-1"]
    consumer.close()
    with pytest.raises(magnetar.Timeout):  # the ack committed with it
        client.subscribe(source, "ctp").receive(timeout_millis=500)


def test_a_transaction_spills_past_the_size_threshold_mid_way(cluster):
    small = magnetar.Client(",".join(cluster.broker_urls), one_request_txn_max_bytes=350)
    try:
        broker, source, out = _local(cluster, small, "spill")
        small.create_producer(source).send(b"in")
        consumer = small.subscribe(source, "spill", initial_position=magnetar.InitialPosition.Earliest)
        producer = small.create_producer(out)
        message = consumer.receive(timeout_millis=10000)
        before = _one_request_count(cluster, broker)
        txn = _txn_on(cluster, small, broker)
        sent = [b"%03d" % i + b"x" * 97 for i in range(8)]  # 100 bytes each
        for payload in sent[:3]:
            producer.send(payload, txn=txn)  # kept: 300 bytes
        consumer.acknowledge(message, txn=txn)  # held by the broker
        assert _registered(cluster, txn) == 0
        for payload in sent[3:]:
            producer.send(payload, txn=txn)  # the 4th passes 350 bytes: the classic way
        assert read_all(small, out) == []  # still nothing visible
        txn.commit()

        assert read_all(small, out) == sent  # every message once, in order
        assert _registered(cluster, txn) == 2  # the partition and the subscription, classic
        assert _one_request_count(cluster, broker) == before
        consumer.close()
        with pytest.raises(magnetar.Timeout):  # the held ack became durable, then final
            small.subscribe(source, "spill").receive(timeout_millis=500)
    finally:
        small.close()


def test_a_transaction_with_a_local_and_a_remote_participant_spills_and_commits(cluster, client):
    topics = _topics_on_each_broker(cluster, client, "mixed")
    here, there = sorted(topics)
    source = _topics_on_each_broker(cluster, client, "mixed-in")[here]
    client.create_producer(source).send(b"in")
    consumer = client.subscribe(source, "mixed", initial_position=magnetar.InitialPosition.Earliest)
    local, remote = client.create_producer(topics[here]), client.create_producer(topics[there])
    message = consumer.receive(timeout_millis=10000)
    before = _one_request_count(cluster, here)

    txn = _txn_on(cluster, client, here)
    local.send(b"local", txn=txn)            # kept
    consumer.acknowledge(message, txn=txn)   # held
    remote.send(b"remote", txn=txn)          # another broker's partition: spills
    txn.commit()

    assert read_all(client, topics[here]) == [b"local"]
    assert read_all(client, topics[there]) == [b"remote"]
    assert _registered(cluster, txn) == 3 and _one_request_count(cluster, here) == before
    consumer.close()
    with pytest.raises(magnetar.Timeout):
        client.subscribe(source, "mixed").receive(timeout_millis=500)


def test_an_aborted_one_request_transaction_leaves_nothing_and_redelivers(cluster, client):
    broker, source, out = _local(cluster, client, "abort")
    client.create_producer(source).send(b"in")
    consumer = client.subscribe(source, "abort", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(out)
    message = consumer.receive(timeout_millis=10000)
    txn = _txn_on(cluster, client, broker)
    producer.send(b"never", txn=txn)
    consumer.acknowledge(message, txn=txn)
    txn.abort()

    again = consumer.receive(timeout_millis=10000)
    assert (again.data(), again.redelivery_count()) == (b"in", 1)
    assert read_all(client, out) == [] and _status(cluster, txn) == pb.TXN_ABORTED
    with pytest.raises(magnetar.InvalidTxnStatusError):
        txn.commit()


def test_a_producers_sequence_ids_in_one_request_transactions(cluster, client):
    """Dedup and one-request transactions: the commit stores the producer's sequence ids
    with its data (a new producer of the same name goes on after them); plain sends and
    concurrent one-request transactions of one producer lose nothing and duplicate
    nothing; a transaction that gives its own sequence ids keeps the classic path, whose
    dedup drops a repeated id."""
    broker, out, other = _local(cluster, client, "dedup")
    producer = client.create_producer(out, producer_name="dedup-p")
    producer.send(b"p0")
    producer.send(b"p1")
    txn = _txn_on(cluster, client, broker)
    producer.send(b"t2", txn=txn)
    producer.send(b"t3", txn=txn)
    txn.commit()
    assert _registered(cluster, txn) == 0  # one request
    producer.close()
    again = client.create_producer(out, producer_name="dedup-p")
    assert again.last_sequence_id() == 3  # stored by the one-request commit, with its data
    assert cluster.query("SELECT last_sequence_id FROM producer_sequences "
                         "WHERE producer_name = 'dedup-p'")[0][0] == 3
    again.close()

    async def interleaved() -> None:
        aclient = amagnetar.Client(",".join(cluster.broker_urls))
        try:
            shared = await aclient.create_producer(other, producer_name="dedup-shared",
                                                   batching_max_publish_delay_ms=0)

            async def in_txn(i: int) -> None:
                t = await aclient.new_transaction()
                await asyncio.gather(shared.send(b"t%d-a" % i, txn=t), shared.send(b"t%d-b" % i, txn=t))
                await t.commit()

            plain = [shared.send(b"plain-%d" % i) for i in range(8)]
            await asyncio.gather(*(in_txn(i) for i in range(8)), *plain)
        finally:
            await aclient.close()

    asyncio.run(interleaved())
    got = read_all(client, other)
    expected = [b"t%d-%s" % (i, s) for i in range(8) for s in (b"a", b"b")] + [b"plain-%d" % i for i in range(8)]
    assert sorted(got) == sorted(expected)  # none judged a duplicate, none twice

    # A plain send still open in the producer (a long publish delay) when a one-request
    # commit of later sequence ids goes out: the commit waits for it, or the stored
    # sequence id would make it look like a duplicate and it would be dropped.
    delayed = client.create_producer(other, producer_name="dedup-delayed", batching_max_publish_delay_ms=500)
    done = []
    delayed.send_async(b"plain-first", lambda result, _: done.append(result))
    txn = _txn_on(cluster, client, broker)
    delayed.send_async(b"txn-second", lambda result, _: done.append(result), txn=txn)
    txn.commit()
    assert _registered(cluster, txn) == 0
    delayed.flush()
    assert done == [magnetar.Result.Ok] * 2
    assert read_all(client, other)[-2:] == [b"plain-first", b"txn-second"]

    explicit = client.create_producer(out, producer_name="dedup-explicit")
    one_request = _one_request_count(cluster, broker)
    registered = []
    for _ in range(2):  # the same sequence id in two transactions: stored once
        txn = _txn_on(cluster, client, broker)
        explicit.send(b"given-7", sequence_id=7, txn=txn)
        txn.commit()
        registered.append(_registered(cluster, txn))
    assert registered == [1, 0]  # classic: the first registered, the duplicate stored nothing
    assert _one_request_count(cluster, broker) == one_request
    assert read_all(client, out).count(b"given-7") == 1


def test_key_fencing_at_a_one_request_commit(cluster):
    """A keyed client fenced by a newer connection of its key, with a one-request
    transaction under way: its commit raises ExpiredTransactionError, nothing of it is
    visible, and the newer holder commits."""
    urls = ",".join(cluster.broker_urls)
    old, new = (magnetar.Client(urls, transaction_key="one-request-key") for _ in range(2))
    try:
        txn = old.new_transaction()
        hosting = [name for name in cluster.names("broker") if cluster.url(name) == cluster.query(
            "SELECT url FROM coordinators WHERE coordinator_id = $1", txn.txn_id.most_bits)[0][0]]
        out = _topics_on_each_broker(cluster, old, "keyed")[hosting[0]]  # served by its coordinator's broker
        producer = old.create_producer(out)
        producer.send(b"fenced", txn=txn)          # kept in the old client
        fresh = new.new_transaction()               # fences the old holder
        with pytest.raises(magnetar.ExpiredTransactionError):
            txn.commit()
        assert _registered(cluster, txn) == 0  # it was a one-request transaction
        new.create_producer(out).send(b"holder", txn=fresh)
        fresh.commit()
        assert read_all(new, out) == [b"holder"]
        row = cluster.query("SELECT status, expired FROM transactions WHERE coordinator_id = $1 "
                            "AND txn_id = $2", txn.txn_id.most_bits, txn.txn_id.least_bits)[0]
        assert (row["status"], row["expired"]) == (pb.TXN_ABORTED, True)
    finally:
        old.close()
        new.close()


@pytest.mark.parametrize("point", ["broker.one_request.before_commit", "broker.one_request.after_commit"])
def test_the_hosting_broker_killed_around_a_one_request_commit(cluster_factory, point):
    """SIGKILL of the broker hosting the coordinator just before its one-request commit's
    statement (nothing of it durable: OPEN, no message) or just after its COMMIT, before
    the reply (all of it durable, the reply lost).  The client retries its commit until
    the broker is back: every message once, the ack final, the status COMMITTED."""
    cluster = cluster_factory(brokers=1, coordinator_in_broker=True)
    cluster.restart("broker-0", extra_env={"MAGNETAR_FAILPOINTS": point})
    client = magnetar.Client(cluster.service_url)
    try:
        client.create_producer("one-request-in").send(b"in")
        consumer = client.subscribe("one-request-in", "ctp",
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer("one-request-out")
        message = consumer.receive(timeout_millis=10000)
        txn = client.new_transaction()
        for i in range(3):
            producer.send(f"o{i}".encode(), txn=txn)
        consumer.acknowledge(message, txn=txn)
        committer, outcome = commit_in_background(txn)  # retried until the broker is back
        cluster.services["broker-0"].process.wait(30)  # it killed itself at the failpoint
        entries = cluster.query("SELECT count(*) FROM entries e JOIN topics t USING (topic_id) "
                                "WHERE t.topic LIKE '%one-request-out'")[0][0]
        if point.endswith("before_commit"):
            assert (_status(cluster, txn), entries) == (pb.TXN_OPEN, 0)  # nothing
        else:
            assert (_status(cluster, txn), entries) == (pb.TXN_COMMITTED, 1)  # all, one entry
        cluster.start("broker-0")
        committer.join(60)
        assert "ok" in outcome, outcome
        assert read_all(client, "one-request-out") == [b"o0", b"o1", b"o2"]
        assert _status(cluster, txn) == pb.TXN_COMMITTED and _registered(cluster, txn) == 0
        consumer.close()
        with pytest.raises(magnetar.Timeout):  # the ack is final: "in" is not redelivered
            client.subscribe("one-request-in", "ctp").receive(timeout_millis=500)
    finally:
        client.close()


def test_a_chunked_message_commits_whole_in_one_request(cluster):
    """With a threshold above the brokers' max_message_size, a message past that size
    travels in chunks (Pulsar's format) kept by the transaction; its one-request commit
    writes them together, and a reader gets the message back whole, once."""
    roomy = magnetar.Client(",".join(cluster.broker_urls), one_request_txn_max_bytes=64 * 1024 * 1024)
    try:
        broker, out, _ = _local(cluster, roomy, "chunked")
        producer = roomy.create_producer(out, chunking_enabled=True, batching_enabled=False)
        data = os.urandom(5 * 1024 * 1024 + 7)  # past the brokers' max_message_size (5 MiB)
        before = _one_request_count(cluster, broker)
        txn = _txn_on(cluster, roomy, broker)
        producer.send(data, txn=txn)
        txn.commit()
        assert _one_request_count(cluster, broker) == before + 1
        assert read_all(roomy, out) == [data]
    finally:
        roomy.close()


def test_a_delayed_message_takes_its_transaction_the_classic_way_and_waits_for_its_time(cluster, client):
    """A one-request commit carries no delivery time (issue 27's delayed delivery): a
    transaction sending a delayed message spills, and the message still waits for its
    time after the commit on a Shared subscription."""
    broker, _, out = _local(cluster, client, "delayed")
    consumer = client.subscribe(out, "d", consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(out)
    before = _one_request_count(cluster, broker)
    txn = _txn_on(cluster, client, broker)
    producer.send(b"at commit", txn=txn)
    producer.send(b"delayed", deliver_after=timedelta(seconds=5), txn=txn)
    txn.commit()
    assert _one_request_count(cluster, broker) == before and _registered(cluster, txn) == 1
    assert consumer.receive(timeout_millis=10000).data() == b"at commit"
    with pytest.raises(magnetar.Timeout):   # not before its time
        consumer.receive(timeout_millis=1000)
    assert consumer.receive(timeout_millis=10000).data() == b"delayed"
    consumer.close()
