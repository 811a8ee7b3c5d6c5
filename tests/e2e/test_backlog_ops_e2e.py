"""Backlog operations (issue 16) on real processes: create-subscription, skip,
clear-backlog, reset-cursor by time and by message id, peek, get-message-by-id,
last-message-id, terminate, unload and update-partitioned-topic through the admin REST
API and ``magnetar-admin``, with connected clients; their bad inputs; live rates.

One cluster (two brokers) serves the whole module: each test uses its own topics.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import magnetar
from magnetar.admin_cli import run as admin_cli
from tests.waiting import wait_until

NS = "public/default"


# One cluster for the module (tests/e2e/conftest.py): topic gauges recomputed often;
# broker-1 exports them per topic, for one topic at most.
pytestmark = [
    pytest.mark.shared_cluster,
    pytest.mark.cluster(brokers=2, env={"MAGNETAR_TOPIC_METRICS_INTERVAL_MS": "300"},
                        service_env={"broker-1": {"MAGNETAR_METRICS_PER_TOPIC": "true",
                                                  "MAGNETAR_METRICS_MAX_TOPICS": "1"}}),
]


def call(cluster, method: str, path: str, body=None, accept: str = "application/json"):
    """(status, headers, body bytes) of one admin request; never raises on 4xx."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(cluster.admin_url + path, data=data, method=method,
                                 headers={"accept": accept, "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def ok(cluster, method: str, path: str, body=None):
    status, _, raw = call(cluster, method, path, body)
    assert status in (200, 204), f"{method} {path}: HTTP {status}: {raw[:300]!r}"
    return json.loads(raw) if raw else None


def refused(cluster, method: str, path: str, status: int, body=None, reason: str = "") -> str:
    got, _, raw = call(cluster, method, path, body)
    assert got == status, f"{method} {path}: expected {status}, got {got}: {raw[:300]!r}"
    answer = json.loads(raw)
    assert reason.lower() in answer["reason"].lower(), answer
    return answer["reason"]


def topic_path(name: str) -> str:
    return f"/admin/v2/persistent/{NS}/{name}"


def backlog(cluster, name: str, sub: str) -> int:
    return ok(cluster, "GET", topic_path(name) + "/stats")["subscriptions"][sub]["msgBacklog"]


def produce(client, name: str, count: int, start: int = 0, batching: bool = False) -> list:
    producer = client.create_producer(f"persistent://{NS}/{name}", batching_enabled=batching)
    if batching:
        for i in range(start, start + count):
            producer.send_async(f"m{i}".encode(), None, properties={"i": str(i)})
        producer.flush()
        ids = []
    else:
        ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}")
               for i in range(start, start + count)]
    producer.close()
    return ids


def receive_all(consumer, count: int, timeout_ms: int = 5000) -> list[bytes]:
    return [consumer.receive(timeout_ms).data() for _ in range(count)]


def consumer_ids(cluster, name: str, sub: str) -> set[int]:
    subs = ok(cluster, "GET", topic_path(name) + "/stats")["subscriptions"]
    return {c["consumerId"] for c in subs.get(sub, {}).get("consumers", [])}


def reset_and_wait(cluster, name: str, sub: str, path: str, body=None) -> None:
    """Reset the cursor, then wait until the consumer has subscribed again (a client
    learns of a reset at its next fetch, as a Pulsar client at its connection's close;
    what it hands out before that is still the old subscription's)."""
    before = consumer_ids(cluster, name, sub)
    ok(cluster, "POST", topic_path(name) + f"/subscription/{sub}/" + path, body)
    wait_until(lambda: consumer_ids(cluster, name, sub) - before, 10, "the consumer to subscribe again")


def cli(cluster, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = admin_cli(["--admin-url", cluster.admin_url, *argv])
    return code, out.getvalue() + err.getvalue()


# ---------------------------------------------------------------- peek, skip, clear


def test_peek_does_not_move_the_cursor_and_skip_and_clear_do(cluster, client):
    name = "peek-skip"
    ok(cluster, "PUT", topic_path(name))
    ok(cluster, "PUT", topic_path(name) + "/subscription/s", {"ledgerId": -1, "entryId": -1})  # earliest
    produce(client, name, 10)
    assert backlog(cluster, name, "s") == 10

    # Pulsar's REST peek: the payload as the body, its metadata in X-Pulsar-* headers.
    status, headers, raw = call(cluster, "GET", topic_path(name) + "/subscription/s/position/2",
                                accept="application/octet-stream")
    assert status == 200 and raw == b"m1"
    assert headers["X-Pulsar-Message-ID"] == "0:1:-1:0"
    assert headers["X-Pulsar-PROPERTY-i"] == "1" and headers["X-Pulsar-partition-key"] == "k1"
    assert int(headers["X-Pulsar-publish-time"]) > 0
    peeked = ok(cluster, "GET", topic_path(name) + "/subscription/s/peek?count=3")["messages"]
    assert [base64.b64decode(m["payload"]) for m in peeked] == [b"m0", b"m1", b"m2"]
    assert backlog(cluster, name, "s") == 10  # peeking moved nothing

    ok(cluster, "POST", topic_path(name) + "/subscription/s/skip/3")
    assert backlog(cluster, name, "s") == 7
    first = ok(cluster, "GET", topic_path(name) + "/subscription/s/peek?count=1")["messages"][0]
    assert base64.b64decode(first["payload"]) == b"m3"

    code, text = cli(cluster, "topics", "peek-messages", f"{NS}/{name}", "-s", "s", "-n", "2")
    assert code == 0 and "m3" in text and "m4" in text and "Message ID: 0:4:-1:0" in text
    code, text = cli(cluster, "topics", "clear-backlog", f"{NS}/{name}", "-s", "s")
    assert code == 0, text
    assert backlog(cluster, name, "s") == 0
    refused(cluster, "GET", topic_path(name) + "/subscription/s/position/1", 404, reason="no message at position 1")

    # A consumer of the cleared subscription gets only what comes next.
    consumer = client.subscribe(f"persistent://{NS}/{name}", "s")
    produce(client, name, 1, start=10)
    assert consumer.receive(5000).data() == b"m10"
    consumer.close()


def test_skip_counts_messages_inside_batches(cluster, client):
    name = "skip-batches"
    ok(cluster, "PUT", topic_path(name))
    ok(cluster, "PUT", topic_path(name) + "/subscription/s", {"ledgerId": -1, "entryId": -1})
    produce(client, name, 10, batching=True)  # few entries, many messages each
    entries = ok(cluster, "GET", topic_path(name) + "/internalStats")["numberOfEntries"]
    assert entries < 10
    ok(cluster, "POST", topic_path(name) + "/subscription/s/skip/4")
    assert backlog(cluster, name, "s") == 6
    # Peek starts inside the batch the skip stopped in.
    peeked = ok(cluster, "GET", topic_path(name) + "/subscription/s/peek?count=2")["messages"]
    assert [base64.b64decode(m["payload"]) for m in peeked] == [b"m4", b"m5"]
    consumer = client.subscribe(f"persistent://{NS}/{name}", "s")
    assert receive_all(consumer, 6) == [f"m{i}".encode() for i in range(4, 10)]
    consumer.close()


# ---------------------------------------------------------------- create-subscription, reset


def test_create_subscription_at_a_message_id_and_latest(cluster, client):
    name = "create-at"
    ok(cluster, "PUT", topic_path(name))
    ids = produce(client, name, 5)
    ok(cluster, "PUT", topic_path(name) + "/subscription/at2",
       {"ledgerId": 0, "entryId": ids[2].entry_id(), "batchIndex": -1})
    ok(cluster, "PUT", topic_path(name) + "/subscription/latest")  # no body: latest
    code, text = cli(cluster, "topics", "create-subscription", f"{NS}/{name}", "-s", "early", "-m", "earliest")
    assert code == 0, text
    assert backlog(cluster, name, "at2") == 3
    assert backlog(cluster, name, "latest") == 0
    assert backlog(cluster, name, "early") == 5
    refused(cluster, "PUT", topic_path(name) + "/subscription/at2", 409, reason="already exists")


def test_reset_cursor_by_message_id_and_by_time_redelivers_to_a_connected_consumer(cluster, client):
    name = "reset"
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared)
    ids = produce(client, name, 5)
    # The reset by time names a millisecond after every publish time of m0-m4.
    since = int(time.time() * 1000) + 1
    wait_until(lambda: time.time() * 1000 > since, 2, "the clock to pass the reset time")
    produce(client, name, 5, start=5)
    for msg in [consumer.receive(5000) for _ in range(10)]:
        consumer.acknowledge(msg)
    wait_until(lambda: backlog(cluster, name, "s") == 0, 10, "the acks to be stored")

    # By message id: the consumer receives from m3 again without doing anything.
    reset_and_wait(cluster, name, "s", "resetcursor",
                   {"ledgerId": 0, "entryId": ids[3].entry_id(), "partitionIndex": -1, "batchIndex": -1})
    assert receive_all(consumer, 7, 10000) == [f"m{i}".encode() for i in range(3, 10)]

    # By time: the first message published at or after `since` (m5).
    reset_and_wait(cluster, name, "s", f"resetcursor/{since}")
    got = receive_all(consumer, 5, 10000)
    assert got == [f"m{i}".encode() for i in range(5, 10)]
    consumer.close()


def test_reset_forward_drops_what_the_consumer_had_buffered(cluster, client):
    name = "reset-forward"
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "s")
    ids = produce(client, name, 10)
    # The consumer's fetch loop buffers all ten; the application has taken none yet.
    wait_until(lambda: ok(cluster, "GET", topic_path(name) + "/stats")["subscriptions"]["s"]["unackedMessages"]
               == 10, 10, "the consumer to have fetched every message")
    reset_and_wait(cluster, name, "s", "resetcursor", {"ledgerId": 0, "entryId": ids[7].entry_id()})
    assert receive_all(consumer, 3, 10000) == [b"m7", b"m8", b"m9"]  # m0-m6 dropped, as Pulsar does
    with pytest.raises(magnetar.Timeout):
        consumer.receive(300)
    consumer.close()


# ---------------------------------------------------------------- message ids


def test_last_message_id_and_get_message_by_id(cluster, client):
    name = "by-id"
    ok(cluster, "PUT", topic_path(name))
    assert ok(cluster, "GET", topic_path(name) + "/lastMessageId")["entryId"] == -1
    ids = produce(client, name, 3)
    last = ok(cluster, "GET", topic_path(name) + "/lastMessageId")
    assert (last["ledgerId"], last["entryId"]) == (0, ids[-1].entry_id())
    status, headers, raw = call(cluster, "GET", topic_path(name) + f"/ledger/0/entry/{ids[1].entry_id()}",
                                accept="*/*")
    assert status == 200 and raw == b"m1" and headers["X-Pulsar-PROPERTY-i"] == "1"
    code, text = cli(cluster, "topics", "get-message-by-id", f"{NS}/{name}", "-e", str(ids[2].entry_id()))
    assert code == 0 and "m2" in text
    code, text = cli(cluster, "topics", "last-message-id", f"{NS}/{name}")
    assert code == 0 and str(ids[-1].entry_id()) in text


# ---------------------------------------------------------------- terminate


def test_terminate_stops_producers_and_consumers_see_the_end(cluster, client):
    name = "terminate"
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"m{i}".encode())
    answer = ok(cluster, "POST", topic_path(name) + "/terminate")
    assert answer["entryId"] == 2
    with pytest.raises(magnetar.TopicTerminated, match="terminated"):
        producer.send(b"late")
    with pytest.raises(magnetar.TopicTerminated):  # a new producer too
        client.create_producer(topic).send(b"later")
    assert not consumer.has_reached_end_of_topic()
    assert receive_all(consumer, 3) == [b"m0", b"m1", b"m2"]
    wait_until(consumer.has_reached_end_of_topic, 10, "the consumer to see the end of the topic")
    # Terminating again answers the same last message; the topic's stats say so.
    assert ok(cluster, "POST", topic_path(name) + "/terminate")["entryId"] == 2
    assert ok(cluster, "GET", topic_path(name) + "/stats")["terminated"] is True
    consumer.close()


def test_terminate_waits_for_a_transaction_that_sent_to_the_topic(cluster, client):
    """A transaction's messages join the log with its commit marker: terminate waits for
    it to end, so the committed messages come before the end of the topic, and the last
    message id terminate answers is the marker's."""
    name = "terminate-txn"
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"plain")  # entry 0
    txn = client.new_transaction()
    producer.send(b"t0", txn=txn)
    producer.send(b"t1", txn=txn)
    answers: list = []
    terminating = threading.Thread(target=lambda: answers.append(ok(cluster, "POST", topic_path(name) + "/terminate")))
    terminating.start()
    try:
        wait_until(lambda: ok(cluster, "GET", topic_path(name) + "/stats")["terminated"], 10,
                   "the terminate to refuse sends while it waits")
        with pytest.raises(magnetar.TopicTerminated):  # plain sends are refused meanwhile
            producer.send(b"late")
        txn.commit()
    finally:
        terminating.join(30)
    assert answers and answers[0]["entryId"] == 1, answers  # the commit marker, entry 1
    assert ok(cluster, "GET", topic_path(name) + "/lastMessageId")["entryId"] == 1
    assert sorted(receive_all(consumer, 3)) == [b"plain", b"t0", b"t1"]
    wait_until(consumer.has_reached_end_of_topic, 10, "the consumer to see the end of the topic")
    consumer.close()


def test_terminate_refuses_while_a_transaction_stays_open_and_changes_nothing(cluster, client):
    name = "terminate-open-txn"
    topic = f"persistent://{NS}/{name}"
    producer = client.create_producer(topic, batching_enabled=False)
    txn = client.new_transaction()
    producer.send(b"t0", txn=txn)
    refused(cluster, "POST", topic_path(name) + "/terminate", 409, reason="open transaction")
    assert ok(cluster, "GET", topic_path(name) + "/stats")["terminated"] is False
    producer.send(b"plain")  # still taking messages
    txn.commit()
    assert ok(cluster, "POST", topic_path(name) + "/terminate")["entryId"] == 1


# ---------------------------------------------------------------- unload


def _owner(cluster, unit: str) -> str | None:
    for row in ok(cluster, "GET", "/admin/v2/brokers/ownership"):
        if row["topic"] == unit:
            return row["brokerId"]
    return None


def test_unload_moves_the_partition_while_a_producer_sends_and_loses_nothing(cluster, client):
    name = "unload"
    topic = f"persistent://{NS}/{name}"
    ok(cluster, "PUT", topic_path(name))
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"first")
    before = _owner(cluster, topic)
    sent: list[bytes] = []
    stop = threading.Event()

    def keep_sending() -> None:
        i = 0
        while not stop.is_set() and i < 2000:
            producer.send(f"n{i}".encode())
            sent.append(f"n{i}".encode())
            i += 1

    sender = threading.Thread(target=keep_sending)
    sender.start()
    try:
        wait_until(lambda: len(sent) >= 20, 10, "the producer to be sending")
        ok(cluster, "PUT", topic_path(name) + "/unload")
        wait_until(lambda: _owner(cluster, topic) not in (None, before), 10, "the topic to have a new owner")
        count = len(sent)
        wait_until(lambda: len(sent) >= count + 20, 15, "the producer to send on the new owner")
    finally:
        stop.set()
        sender.join(30)
    producer.close()
    got = receive_all(consumer, 1 + len(sent), 15000)
    assert got == [b"first", *sent]  # nothing lost, nothing twice, in order
    with pytest.raises(magnetar.Timeout):
        consumer.receive(300)
    consumer.close()


# ---------------------------------------------------------------- partitioned topics


def test_operations_apply_to_every_partition(cluster, client):
    name = "parts"
    topic = f"persistent://{NS}/{name}"
    ok(cluster, "PUT", topic_path(name) + "/partitions", 2)
    ok(cluster, "PUT", topic_path(name) + "/subscription/s", {"ledgerId": -1, "entryId": -1})
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
    producer.close()
    stats = ok(cluster, "GET", topic_path(name) + "/partitioned-stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 10
    per_partition = [p["subscriptions"]["s"]["msgBacklog"] for p in stats["partitions"].values()]
    ok(cluster, "POST", topic_path(name) + "/subscription/s/skip/1")
    skipped = sum(1 for n in per_partition if n)  # one per partition that had messages
    stats = ok(cluster, "GET", topic_path(name) + "/partitioned-stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 10 - skipped
    peeked = ok(cluster, "GET", topic_path(name) + "/subscription/s/peek?count=100")["messages"]
    assert len(peeked) == 10 - skipped
    lasts = ok(cluster, "GET", topic_path(name) + "/lastMessageId")["partitions"]
    assert set(lasts) == {f"{topic}-partition-0", f"{topic}-partition-1"}

    ok(cluster, "POST", topic_path(name) + "/partitions", 3)
    assert ok(cluster, "GET", topic_path(name) + "/partitions") == {"partitions": 3}
    refused(cluster, "POST", topic_path(name) + "/partitions", 409, body=2, reason="can only grow")
    code, text = cli(cluster, "topics", "update-partitioned-topic", f"{NS}/{name}", "-p", "3")
    assert code == 1 and "can only grow" in text
    ok(cluster, "POST", topic_path(name) + "/subscription/s/skip_all")
    assert ok(cluster, "GET", topic_path(name) + "/partitioned-stats")["subscriptions"]["s"]["msgBacklog"] == 0

    refused(cluster, "POST", topic_path(name) + "/terminate", 409, reason="terminate/partitions")
    answer = ok(cluster, "POST", topic_path(name) + "/terminate/partitions")
    assert set(answer) == {"0", "1", "2"}
    with pytest.raises(magnetar.TopicTerminated):
        client.create_producer(topic).send(b"late", partition_key="key-1")


# ---------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_a_reason_and_changes_nothing(cluster, client):
    name = "bad"
    ok(cluster, "PUT", topic_path(name))
    ok(cluster, "PUT", topic_path(name) + "/subscription/s", {"ledgerId": -1, "entryId": -1})
    produce(client, name, 3)
    sub = topic_path(name) + "/subscription/s"
    refused(cluster, "POST", topic_path(name) + "/subscription/nope/skip/1", 404, reason="'nope' does not exist")
    refused(cluster, "POST", topic_path("no-such-topic") + "/subscription/s/skip/1", 404, reason="does not exist")
    refused(cluster, "POST", sub + "/skip/abc", 400, reason="numMessages")
    refused(cluster, "POST", sub + "/skip/-1", 400, reason="numMessages")
    refused(cluster, "POST", sub + "/skip/99999999999999999999", 400, reason="numMessages")
    future = int(time.time() * 1000) + 3_600_000
    refused(cluster, "POST", sub + f"/resetcursor/{future}", 400, reason="in the future")
    refused(cluster, "POST", sub + "/resetcursor", 404, body={"ledgerId": 0, "entryId": 99}, reason="past the end")
    refused(cluster, "POST", sub + "/resetcursor", 404, body={"ledgerId": 0, "entryId": 1, "batchIndex": 7},
            reason="batch index 7")
    refused(cluster, "POST", sub + "/resetcursor", 404, body={"ledgerId": 5, "entryId": 1}, reason="ledger 5")
    refused(cluster, "POST", sub + "/resetcursor", 400, body={"ledgerId": 0}, reason="entryId")
    refused(cluster, "POST", sub + "/resetcursor", 400, body={"ledgerId": 0, "entryId": "x"}, reason="integer")
    refused(cluster, "POST", sub + "/resetcursor", 400, body=b"{not json", reason="not valid JSON")
    refused(cluster, "PUT", topic_path(name) + "/subscription/t", 400, body=[1, 2], reason="message id")
    refused(cluster, "GET", sub + "/position/0", 400, reason="messagePosition")
    refused(cluster, "GET", sub + "/peek?count=100000", 400, reason="count")
    refused(cluster, "GET", topic_path(name) + "/ledger/0/entry/77", 404, reason="past the end")
    refused(cluster, "GET", topic_path(name) + "/ledger/3/entry/0", 404, reason="ledger 3")
    refused(cluster, "POST", topic_path(name) + "/partitions", 404, body=4, reason="does not exist")
    refused(cluster, "POST", topic_path(name) + "/partitions", 400, body="four", reason="integer")
    refused(cluster, "PUT", topic_path("no-such-topic") + "/unload", 404, reason="does not exist")
    code, text = cli(cluster, "topics", "reset-cursor", f"{NS}/{name}", "-s", "s")
    assert code == 2 and "exactly one of" in text
    code, text = cli(cluster, "topics", "reset-cursor", f"{NS}/{name}", "-s", "s", "-m", "zz")
    assert code == 2 and "LEDGER:ENTRY" in text
    assert backlog(cluster, name, "s") == 3  # nothing moved
    assert ok(cluster, "GET", f"/admin/v2/persistent/{NS}/{name}/subscriptions") == ["s"]


# ---------------------------------------------------------------- rates


def test_stats_carry_rates_under_load(cluster, client):
    name = "rates"
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    for _ in range(200):
        producer.send_async(b"x" * 100, None)
    producer.flush()
    for _ in range(200):
        consumer.acknowledge(consumer.receive(5000))
    stats = ok(cluster, "GET", topic_path(name) + "/stats")
    assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] >= 100 * stats["msgRateIn"]
    assert stats["msgRateOut"] > 0 and stats["msgThroughputOut"] > 0
    assert stats["subscriptions"]["s"]["msgRateOut"] > 0
    assert stats["averageMsgSize"] >= 100
    producer.close()
    consumer.close()


def test_msg_rate_redeliver_counts_nacks_redeliver_unacked_and_a_closed_consumers_messages(cluster, client):
    name = "redeliver"
    topic = f"persistent://{NS}/{name}"
    subs = {s: client.subscribe(topic, s, consumer_type=magnetar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100) for s in ("nack", "all", "close")}
    produce(client, name, 6)
    got = {s: [c.receive(5000) for _ in range(6)] for s, c in subs.items()}

    def rate(sub: str) -> float:
        return ok(cluster, "GET", topic_path(name) + "/stats")["subscriptions"][sub]["msgRateRedeliver"]

    assert {s: rate(s) for s in subs} == {"nack": 0.0, "all": 0.0, "close": 0.0}
    for msg in got["nack"][:2]:
        subs["nack"].negative_acknowledge(msg)
    subs["all"].redeliver_unacknowledged_messages()
    subs["close"].close()  # its 6 unacknowledged messages go back for redelivery
    # The rate is over a 10 s window: n messages read at least n / 11 per second.
    for sub, count in (("nack", 2), ("all", 6), ("close", 6)):
        wait_until(lambda sub=sub, count=count: rate(sub) >= count / 11, 10, f"{sub}: {count} redeliveries counted",
                   explain=lambda sub=sub: rate(sub))
    consumers = ok(cluster, "GET", topic_path(name) + "/stats")["subscriptions"]["nack"]["consumers"]
    assert consumers[0]["msgRateRedeliver"] >= 2 / 11  # the consumer that handed them back
    for sub in ("nack", "all"):
        subs[sub].close()


def test_redeliver_unacknowledged_drops_the_queue_so_each_message_comes_again_once_in_order(cluster, client):
    # Pulsar's client clears its incoming queue first: what was prefetched but not yet
    # received comes back with the rest, not twice.
    name = "redeliver-queued"
    consumer = client.subscribe(f"persistent://{NS}/{name}", "s", initial_position=magnetar.InitialPosition.Earliest)
    produce(client, name, 6)
    assert [consumer.receive(5000).data() for _ in range(2)] == [b"m0", b"m1"]  # m2..m5 queued
    consumer.redeliver_unacknowledged_messages()
    again = [consumer.receive(5000) for _ in range(6)]
    assert [m.data() for m in again] == [f"m{i}".encode() for i in range(6)]
    assert all(m.redelivery_count() == 1 for m in again)
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=300)
    consumer.close()


# ---------------------------------------------------------------- Prometheus


def scrape(cluster, broker: str) -> list[tuple[str, dict, float]]:
    with urllib.request.urlopen(cluster.url(broker) + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def gauge(samples, name: str, **labels) -> float | None:
    found = [v for n, lab, v in samples if n == name and all(lab.get(k) == v2 for k, v2 in labels.items())]
    return sum(found) if found else None


def place_on(cluster, client, name: str, broker: str) -> None:
    """Serve the topic on ``broker`` (an unload hands it to the other one of two)."""
    topic = f"persistent://public/metrics/{name}"
    client.create_producer(topic).close()  # looked up: it has an owner
    if _owner(cluster, topic) != broker:
        ok(cluster, "PUT", f"/admin/v2/persistent/public/metrics/{name}/unload")
        client.create_producer(topic).close()
    assert _owner(cluster, topic) == broker


def test_prometheus_topic_gauges_per_namespace_and_per_topic_bounded(cluster, client):
    ok(cluster, "PUT", "/admin/v2/namespaces/public/metrics")
    # "big" has the largest backlog of every topic this module leaves on a broker.
    for name, count in (("big", 1000), ("small", 2)):
        path = f"/admin/v2/persistent/public/metrics/{name}"
        ok(cluster, "PUT", path)
        ok(cluster, "PUT", path + "/subscription/s", {"ledgerId": -1, "entryId": -1})
        producer = client.create_producer(f"persistent://public/metrics/{name}")
        for _ in range(count):
            producer.send_async(b"x" * 100, None)
        producer.flush()
        producer.close()

    # broker-0: per namespace (no topic label).
    place_on(cluster, client, "big", "broker-0")
    place_on(cluster, client, "small", "broker-0")
    wait_until(lambda: gauge(scrape(cluster, "broker-0"), "pulsar_msg_backlog", namespace="public/metrics") == 1002,
               30, "broker-0 to export the namespace's backlog",
               explain=lambda: [x for x in scrape(cluster, "broker-0") if x[0].startswith("pulsar_msg")])
    samples = scrape(cluster, "broker-0")
    assert gauge(samples, "pulsar_storage_size", namespace="public/metrics") >= 100_200
    assert not [lab for n, lab, _ in samples if n == "pulsar_msg_backlog" and "topic" in lab]

    # broker-1: per topic, one topic at most: the larger backlog keeps its series.
    place_on(cluster, client, "big", "broker-1")
    place_on(cluster, client, "small", "broker-1")
    big = "persistent://public/metrics/big"
    wait_until(lambda: gauge(scrape(cluster, "broker-1"), "pulsar_msg_backlog", topic="_other",
                             namespace="public/metrics") == 2, 30, "broker-1 to fold the small topic",
               explain=lambda: [x for x in scrape(cluster, "broker-1") if x[0].startswith("pulsar_msg")])
    samples = scrape(cluster, "broker-1")
    assert gauge(samples, "pulsar_msg_backlog", topic=big) == 1000
    assert gauge(samples, "pulsar_subscription_back_log", topic=big, subscription="s") == 1000
    assert gauge(samples, "pulsar_storage_size", topic=big) >= 100_000
    assert gauge(samples, "magnetar_broker_topic_metrics_folded") >= 1
    assert gauge(samples, "pulsar_subscription_back_log", topic="persistent://public/metrics/small") is None

    # Messages acknowledged individually beyond the mark-delete position are not backlog
    # (Pulsar's msgBacklog): three acked out of order leave 997, in the gauges as in stats.
    consumer = client.subscribe(big, "s")
    received = [consumer.receive(5000) for _ in range(6)]
    for msg in received[1::2]:
        consumer.acknowledge(msg)
    wait_until(lambda: gauge(scrape(cluster, "broker-1"), "pulsar_subscription_back_log", topic=big,
                             subscription="s") == 997, 30, "the gauge to take off the individual acks",
               explain=lambda: gauge(scrape(cluster, "broker-1"), "pulsar_subscription_back_log", topic=big))
    assert gauge(scrape(cluster, "broker-1"), "pulsar_msg_backlog", topic=big) == 997
    stats = ok(cluster, "GET", "/admin/v2/persistent/public/metrics/big/stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 997
    consumer.close()
