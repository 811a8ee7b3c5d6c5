"""Issue #2 end to end: subscription types, negative acks, deduplication state across
re-creation, broker SIGKILL and the namespace switch, and limit/unknown-id errors."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import keys_for_each_consumer, read_all
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e




def test_failover_delivers_to_the_active_consumer_and_moves_on_close(cluster, client):
    producer = client.create_producer("failover")
    a = client.subscribe("failover", "f", consumer_type=magnetar.ConsumerType.Failover, consumer_name="a",
                         initial_position=magnetar.InitialPosition.Earliest)
    b = client.subscribe("failover", "f", consumer_type=magnetar.ConsumerType.Failover, consumer_name="b",
                         initial_position=magnetar.InitialPosition.Earliest)
    producer.send(b"one")
    assert a.receive(timeout_millis=5000).data() == b"one"  # "a" sorts first: active
    with pytest.raises(magnetar.Timeout):
        b.receive(timeout_millis=500)
    a.close()  # its unacknowledged message moves to the new active consumer
    assert b.receive(timeout_millis=5000).data() == b"one"


def test_exclusive_subscription_refuses_a_second_consumer(cluster, client):
    client.subscribe("exclusive-sub", "only")
    with pytest.raises(magnetar.ConsumerBusy):
        client.subscribe("exclusive-sub", "only")
    with pytest.raises(magnetar.ConsumerBusy):
        client.subscribe("exclusive-sub", "only", consumer_type=magnetar.ConsumerType.Shared)


def test_key_shared_keeps_each_key_on_one_consumer(cluster, client):
    consumers = [client.subscribe("keyed", "k", consumer_type=magnetar.ConsumerType.KeyShared,
                                  consumer_name=f"c{i}", initial_position=magnetar.InitialPosition.Earliest)
                 for i in range(2)]
    # Twenty keys the broker's ring gives each consumer (computed, not hoped for).
    mine = keys_for_each_consumer(cluster, "persistent://public/default/keyed", "k", 20)
    keys = mine["c0"] + mine["c1"]
    producer = client.create_producer("keyed")
    for i in range(200):
        producer.send_async(f"{keys[i % 40]}:{i}".encode(), lambda r, m: None, partition_key=keys[i % 40])
    producer.flush()
    owner_of_key: dict[str, int] = {}
    order: dict[str, list[int]] = {}
    received = 0
    deadline = time.monotonic() + 30
    while received < 200 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=100)
            except magnetar.Timeout:
                continue
            key, seq = msg.data().decode().split(":")
            assert owner_of_key.setdefault(key, index) == index, f"key {key} went to two consumers"
            order.setdefault(key, []).append(int(seq))
            consumer.acknowledge(msg)
            received += 1
    assert received == 200
    assert all(seqs == sorted(seqs) for seqs in order.values())  # per-key order kept
    assert {key for key, index in owner_of_key.items() if index == 0} == set(mine["c0"])  # where the ring says
    assert {key for key, index in owner_of_key.items() if index == 1} == set(mine["c1"])


def test_negative_ack_redelivers_after_the_delay_with_a_count(cluster, client):
    consumer = client.subscribe("nacked", "s", negative_ack_redelivery_delay_ms=300,
                                initial_position=magnetar.InitialPosition.Earliest)
    client.create_producer("nacked").send(b"retry me")
    first = consumer.receive(timeout_millis=5000)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == b"retry me" and again.redelivery_count() == 1


def test_dedup_state_survives_recreation_and_broker_sigkill(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/dedup-survives"
        producer = client.create_producer(topic, producer_name="writer")
        for i in range(5):
            producer.send(f"m{i}".encode())
        producer.close()
        again = client.create_producer(topic, producer_name="writer")
        assert again.last_sequence_id() == 4
        again.send(b"dup", sequence_id=3)  # at or below the last id: dropped, no error
        cluster.kill(cluster.owner_of(topic), signal.SIGKILL)
        again.send(b"dup-after-kill", sequence_id=4)
        again.send(b"m5")  # continues at 5 on the new owner
        again.close()
        third = client.create_producer(topic, producer_name="writer")
        assert third.last_sequence_id() == 5
        assert read_all(client, topic) == [f"m{i}".encode() for i in range(6)]
    finally:
        client.close()


def test_namespace_can_turn_deduplication_off(cluster, client):
    req = urllib.request.Request(f"{cluster.admin_url}/admin/v2/namespaces/public/default/deduplication",
                                 data=json.dumps(False).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()
    producer = client.create_producer("no-dedup", producer_name="p")
    producer.send(b"a", sequence_id=7)
    producer.send(b"b", sequence_id=7)  # stored too: the policy is off
    assert read_all(client, "no-dedup") == [b"a", b"b"]


def _raw(cluster, path: str, message) -> tuple[int, pb.Error | None]:
    req = urllib.request.Request(cluster.broker_urls[0] + path, data=message.SerializeToString(),
                                 method="POST", headers={"content-type": "application/x-protobuf"})
    try:
        urllib.request.urlopen(req, timeout=10).close()
        return 200, None
    except urllib.error.HTTPError as err:
        return err.code, pb.Error.FromString(err.read())


def test_unknown_ids_and_limits_are_clear_errors(cluster):
    status, err = _raw(cluster, "/v1/producers/send", pb.SendRequest(producer_id=999, batch=b"x", num_messages=1))
    assert status == 404 and err.code == pb.PRODUCER_NOT_FOUND and "999" in err.message
    status, err = _raw(cluster, "/v1/consumers/fetch", pb.FetchRequest(consumer_id=12345, max_messages=1))
    assert status == 404 and err.code == pb.CONSUMER_NOT_FOUND
    status, err = _raw(cluster, "/v1/producers/create", pb.CreateProducerRequest(session_id="nope", topic="t"))
    assert status == 404 and err.code == pb.SESSION_NOT_FOUND
    # A batch over the broker's message-count limit is refused and stores nothing.
    with urllib.request.urlopen(urllib.request.Request(
            cluster.broker_urls[0] + "/v1/sessions/open", data=b"", method="POST",
            headers={"content-type": "application/x-protobuf"}), timeout=10) as resp:
        session = pb.OpenSessionResponse.FromString(resp.read()).session_id
    _raw(cluster, "/v1/topics/lookup", pb.LookupRequest(topic="limits-raw"))
    owner = cluster.owner_of("persistent://public/default/limits-raw")
    req = urllib.request.Request(cluster.url(owner) + "/v1/producers/create",
                                 data=pb.CreateProducerRequest(session_id=session, topic="limits-raw")
                                 .SerializeToString(), method="POST",
                                 headers={"content-type": "application/x-protobuf"})
    if owner != "broker-0":  # the session lives on broker-0; open one on the owner
        with urllib.request.urlopen(urllib.request.Request(
                cluster.url(owner) + "/v1/sessions/open", data=b"", method="POST",
                headers={"content-type": "application/x-protobuf"}), timeout=10) as resp:
            session = pb.OpenSessionResponse.FromString(resp.read()).session_id
        req.data = pb.CreateProducerRequest(session_id=session, topic="limits-raw").SerializeToString()
    with urllib.request.urlopen(req, timeout=10) as resp:
        producer_id = pb.CreateProducerResponse.FromString(resp.read()).producer_id
    too_many = pb.SendRequest(producer_id=producer_id, batch=b"\x0a\x00", num_messages=10001,
                              sequence_id=0, highest_sequence_id=10000)
    req = urllib.request.Request(cluster.url(owner) + "/v1/producers/send", data=too_many.SerializeToString(),
                                 method="POST", headers={"content-type": "application/x-protobuf"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    err = pb.Error.FromString(caught.value.read())
    assert caught.value.code == 400 and err.code == pb.BAD_REQUEST and "10000" in err.message


def _until_resubscribed(cluster, topic: str, old_owner: str, timeout: float = 30.0) -> None:
    """Wait until the consumer has subscribed again on the topic's new owner."""
    def resubscribed() -> bool:
        owner = cluster.owner_of(topic)
        if owner in (None, old_owner):
            return False
        try:
            with urllib.request.urlopen(f"{cluster.url(owner)}/internal/v1/topic-stats?topic={topic}",
                                        timeout=5) as resp:
                return bool(json.loads(resp.read())["subscriptions"].get("s", {}).get("consumers"))
        except urllib.error.HTTPError:
            return False

    wait_until(resubscribed, timeout, "the consumer subscribing on the new owner")


def test_messages_queued_before_a_reconnect_are_not_received_twice(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/requeue"
        consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"m{i}".encode())
        first = consumer.receive(timeout_millis=5000)  # the rest sit in the receive queue
        old_owner = cluster.owner_of(topic)
        cluster.kill(old_owner, signal.SIGKILL)
        _until_resubscribed(cluster, topic, old_owner)
        # The new owner redelivers every unacknowledged message; the queued copies from
        # the old connection must not come out as well.
        got = [first.data()]
        while True:
            try:
                got.append(consumer.receive(timeout_millis=4000).data())
            except magnetar.Timeout:
                break
        assert sorted(set(got)) == [f"m{i}".encode() for i in range(5)]
        later = got[1:]
        assert len(later) == len(set(later)), f"received twice after the reconnect: {later}"
    finally:
        client.close()


def test_shared_consumers_split_a_big_batch_by_permits(cluster, client):
    producer = client.create_producer("big-batch", batching_max_publish_delay_ms=50)
    for i in range(100):
        producer.send_async(f"m{i}".encode(), lambda r, m: None)
    producer.flush()  # one stored entry of 100 messages
    first = client.subscribe("big-batch", "work", consumer_type=magnetar.ConsumerType.Shared,
                             initial_position=magnetar.InitialPosition.Earliest, receiver_queue_size=10)
    held = [first.receive(timeout_millis=5000) for _ in range(10)]  # received, not acknowledged
    assert len({m.message_id().entry_id() for m in held}) == 1
    second = client.subscribe("big-batch", "work", consumer_type=magnetar.ConsumerType.Shared,
                              receiver_queue_size=10)
    # The first consumer got its permits' worth of the entry, not all 100 messages.
    got = [second.receive(timeout_millis=5000) for _ in range(10)]
    assert not {m.data() for m in got} & {m.data() for m in held}


@pytest.mark.cluster(brokers=1, env={"MAGNETAR_DEDUPLICATION_PRODUCER_INACTIVITY_TIMEOUT_S": "1"})
def test_an_idle_disconnected_producer_name_loses_its_dedup_state(cluster, client):
    """Pulsar's producer inactivity timeout: a name that stored nothing for the timeout
    and is not connected is forgotten (a Spark task's names would otherwise pile up); a
    connected one is kept however idle."""
    topic = "persistent://public/default/dedup-idle"
    kept = client.create_producer(topic, producer_name="kept")
    kept.send(b"k0")  # first: idle longer than "gone" when "gone" is forgotten
    gone = client.create_producer(topic, producer_name="gone")
    for i in range(3):
        gone.send(f"g{i}".encode())
    gone.close()

    def names() -> set[str]:
        return {r[0] for r in cluster.query("SELECT producer_name FROM producer_sequences")}

    wait_until(lambda: "gone" not in names(), 30, "the idle name being forgotten", interval=0.1)
    assert "kept" in names()  # idle as long, but connected
    again = client.create_producer(topic, producer_name="gone")
    assert again.last_sequence_id() == -1
    again.send(b"g0-again", sequence_id=0)  # a new producer of that name: stored, not a duplicate
    assert read_all(client, topic) == [b"k0", b"g0", b"g1", b"g2", b"g0-again"]
    assert kept.last_sequence_id() == 0


def test_same_producer_name_from_one_client_is_busy(client):
    """Pulsar refuses a second producer with a connected one's name, even from the same
    client (issue 15); the first keeps working."""
    first = client.create_producer("busy-name", producer_name="p")
    with pytest.raises(magnetar.ProducerBusy):
        client.create_producer("busy-name", producer_name="p")
    first.send(b"a")
    assert read_all(client, "busy-name") == [b"a"]


def _post(url: str, path: str, message, reply_type):
    req = urllib.request.Request(url + path, data=message.SerializeToString(), method="POST",
                                 headers={"content-type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return 200, reply_type.FromString(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, pb.Error.FromString(err.read())


def test_retried_create_is_idempotent_another_client_id_is_busy(cluster):
    """A retried create (same session, same client-side producer id) answers the same
    producer; another client-side id with that name in that session is ProducerBusy."""
    _raw(cluster, "/v1/topics/lookup", pb.LookupRequest(topic="retried-create"))
    url = cluster.url(cluster.owner_of("persistent://public/default/retried-create"))
    _, opened = _post(url, "/v1/sessions/open", pb.OpenSessionRequest(), pb.OpenSessionResponse)
    create = pb.CreateProducerRequest(session_id=opened.session_id, topic="retried-create",
                                      producer_name="p", client_producer_id=7)
    status, first = _post(url, "/v1/producers/create", create, pb.CreateProducerResponse)
    assert status == 200
    status, again = _post(url, "/v1/producers/create", create, pb.CreateProducerResponse)
    assert status == 200 and again.producer_id == first.producer_id
    create.client_producer_id = 8
    status, err = _post(url, "/v1/producers/create", create, pb.CreateProducerResponse)
    assert status == 409 and err.code == pb.PRODUCER_BUSY and "'p'" in err.message
