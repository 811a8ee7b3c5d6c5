"""Topic stats: backlog and storage from the database (entries after each subscription's
mark-delete position, minus what was acknowledged individually), live parts from the
owning broker when a live one answers, the database alone otherwise.  The brokers are
real processes (``live``); a broker that does not answer is a frozen one (SIGSTOP)."""

import threading
import time

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.integration.admin.conftest import Admin, http, own, start_admin, until

# Real brokers for the live parts (one cluster for the module; tests use their own topics).
LIVE_CLUSTER = {"brokers": 2, "coordinators": 0, "registry": False, "admin": False}

P = "/admin/v2/persistent"
SOLO = "persistent://public/default/solo"


def _log(admin, topic: str, sizes: list[int], payload: bytes = b"0123456789") -> int:
    """Entries 0..n-1 holding sizes[i] messages each; returns the topic id."""
    topic_id = admin.sql("SELECT topic_id FROM topics WHERE topic = $1", topic)[0]["topic_id"]
    for entry_id, n in enumerate(sizes):
        admin.sql("INSERT INTO entries VALUES ($1, $2, 'p', $2, $2, $3, 0, $4)", topic_id, entry_id, n, payload)
    return topic_id


def _cursor(admin, topic_id: int, name: str, mark_delete: int, acks: dict[int, bytes]) -> None:
    state = pb.CursorState()
    for entry_id, bits in acks.items():
        state.entries.add(entry_id=entry_id, acked_bitset=bits)
    admin.sql("INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry, acked_state) "
              "VALUES ($1, $2, $3, $4)", topic_id, name, mark_delete, state.SerializeToString())


def _solo_with_log(admin) -> int:
    admin.ok("PUT", f"{P}/public/default/solo")
    topic_id = _log(admin, SOLO, [1, 3, 1, 2, 1])  # 8 messages in 5 entries of 10 bytes
    # entry 2 acked whole, entry 3 batch index 0 of 2: 4 after mark-delete 1, 2 of them acked
    _cursor(admin, topic_id, "audit", 1, {2: b"", 3: bytes([0b01])})
    _cursor(admin, topic_id, "fresh", -1, {})
    return topic_id


def test_database_only_stats(admin):
    topic_id = _solo_with_log(admin)
    admin.sql("INSERT INTO txn_entries VALUES ($1, 1, 1, 0, 'p', 9, 9, 1, 'abcde')", topic_id)
    stats = admin.ok("GET", f"{P}/public/default/solo/stats")
    assert stats["liveStats"] is False and stats["ownerBroker"] is None
    assert stats["storageSize"] == 5 * 10 + 5  # the log and the transaction buffer
    assert stats["numberOfEntries"] == 5 and stats["numberOfMessages"] == 8
    assert stats["publishers"] == [] and stats["msgInCounter"] == 0 and stats["msgRateIn"] == 0.0
    assert stats["topicEpoch"] == 0
    assert "accessMode" not in stats  # only a live broker knows it
    audit, fresh = stats["subscriptions"]["audit"], stats["subscriptions"]["fresh"]
    assert audit["msgBacklog"] == 2 and audit["backlogSize"] == 30
    assert audit["consumers"] == [] and audit["unackedMessages"] == 0 and audit["type"] == "None"
    assert fresh["msgBacklog"] == 8 and fresh["backlogSize"] == 50
    assert stats["backlogSize"] == 50


def test_internal_stats(admin):
    _solo_with_log(admin)
    admin.sql("UPDATE topic_owners SET epoch = 7, topic_epoch = 2")
    internal = admin.ok("GET", f"{P}/public/default/solo/internalStats")
    assert internal == admin.ok("GET", f"{P}/public/default/solo/internal-stats")
    assert internal["entriesAddedCounter"] == 5 and internal["numberOfEntries"] == 5
    assert internal["numberOfMessages"] == 8 and internal["totalSize"] == 50
    assert internal["lastConfirmedEntry"] == "4:-1"
    assert internal["ownerBroker"] is None and internal["ownerEpoch"] == 7 and internal["topicEpoch"] == 2
    audit = internal["cursors"]["audit"]
    assert audit["markDeletePosition"] == "1:-1"
    assert audit["individuallyDeletedMessages"] == "[(1:-1..2:-1]]"
    assert audit["batchDeletedIndexes"] == {"3": [0]}
    assert audit["numberOfEntriesSinceFirstNotAckedMessage"] == 3
    assert internal["cursors"]["fresh"]["markDeletePosition"] == "-1:-1"
    assert internal["cursors"]["fresh"]["individuallyDeletedMessages"] == "[]"


def test_empty_topic_stats(admin):
    admin.ok("PUT", f"{P}/public/default/empty")
    assert admin.ok("GET", f"{P}/public/default/empty/internalStats")["lastConfirmedEntry"] == "-1:-1"
    stats = admin.ok("GET", f"{P}/public/default/empty/stats")
    assert stats["storageSize"] == 0 and stats["subscriptions"] == {}


def _client(live):
    return magnetar.Client(",".join(live.broker_urls))


def _thawed(live, broker: str) -> None:
    live.thaw(broker)
    # Its next heartbeat writes now() over whatever the test put in the row.
    until(lambda: http("GET", live.url(broker) + "/readyz")[0] == 200, f"{broker} to answer again")


def test_live_parts_come_from_the_owning_broker(live, live_admin):
    admin, topic = live_admin, "persistent://public/default/st-live"
    admin.ok("PUT", f"{P}/public/default/st-live")
    client, waiter = _client(live), _client(live)
    try:
        holder = client.create_producer(topic, producer_name="p1", batching_enabled=False,
                                        access_mode=magnetar.ProducerAccessMode.Exclusive)
        fresh = client.subscribe(topic, "fresh", initial_position=magnetar.InitialPosition.Earliest)
        fresh.close()  # a durable subscription with no consumer: its backlog is every message
        audit = client.subscribe(topic, "audit", consumer_type=magnetar.ConsumerType.Failover,
                                 consumer_name="c1", initial_position=magnetar.InitialPosition.Earliest)
        reader = client.create_reader(topic, magnetar.MessageId.earliest)
        for i in range(3):
            holder.send(f"m{i}".encode())
        received = [audit.receive(timeout_millis=10000) for _ in range(3)]
        audit.acknowledge(received[1])  # one individual ack beyond the mark-delete position
        second = threading.Thread(target=lambda: waiter.create_producer(
            topic, producer_name="p2", access_mode=magnetar.ProducerAccessMode.WaitForExclusive))
        second.start()
        stats = until(lambda: (lambda st: st if st.get("waitingProducers") == ["p2"]
                               and st["subscriptions"]["audit"]["msgBacklog"] == 2 else None)(
            admin.ok("GET", f"{P}/public/default/st-live/stats")), "p2 waiting and the ack stored")
        assert stats["liveStats"] is True and stats["ownerBroker"] == live.owner_of(topic)
        assert (stats["msgInCounter"], stats["msgOutCounter"]) == (3, 6)  # to audit and to the reader
        assert stats["accessMode"] == "Exclusive" and stats["exclusiveProducer"] == "p1"
        assert stats["topicEpoch"] >= 1 and stats["waitingPublishers"] == 1
        assert stats["deduplicationStatus"] == "Enabled"  # the broker default
        assert [p["producerName"] for p in stats["publishers"]] == ["p1"]
        sub = stats["subscriptions"]["audit"]
        assert sub["type"] == "Failover" and sub["activeConsumerName"] == "c1"
        # The database's count (3 after the mark-delete position, 1 acked individually),
        # with the broker's live part: two delivered messages wait for their ack.
        assert sub["msgBacklog"] == 2 and sub["unackedMessages"] == 2
        readers = [s for name, s in stats["subscriptions"].items() if name not in ("audit", "fresh")]
        assert [s["isDurable"] for s in readers] == [False]
        assert stats["subscriptions"]["fresh"]["consumers"] == []
        assert stats["subscriptions"]["fresh"]["msgBacklog"] == 3
        internal = admin.ok("GET", f"{P}/public/default/st-live/internalStats")
        assert internal["ownerBrokerUrl"] == live.url(live.owner_of(topic))
        holder.close()  # p2 gets the topic
        second.join(30)
        assert not second.is_alive(), "the waiting producer never got the topic"
        reader.close()
    finally:
        client.close()
        waiter.close()


def _owned_topic_with_messages(live, admin, local: str) -> tuple[str, str]:
    """A topic with 2 messages and a durable subscription, served by a live broker."""
    topic = f"persistent://public/default/{local}"
    admin.ok("PUT", f"{P}/public/default/{local}")
    client = _client(live)
    try:
        client.subscribe(topic, "audit").close()
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"a")
        producer.send(b"b")
        producer.close()
    finally:
        client.close()
    return topic, until(lambda: live.owner_of(topic), f"an owner of {topic}")


def test_owner_that_does_not_answer_leaves_database_stats(live, live_admin):
    admin = live_admin
    topic, owner = _owned_topic_with_messages(live, admin, "st-silent")
    live.freeze(owner)  # keeps its socket: the admin's request is accepted and never answered
    try:
        # A pause shorter than its lease: the broker still counts as alive however slow
        # this machine is.
        admin.sql("UPDATE brokers SET heartbeat_at = now() + interval '1 hour' WHERE broker_id = $1", owner)
        started = time.monotonic()
        stats = admin.ok("GET", f"{P}/public/default/st-silent/stats")
        assert time.monotonic() - started >= admin.settings.broker_request_timeout_ms / 1000 * 0.9
        assert stats["liveStats"] is False and stats["ownerBroker"] == owner
        assert stats["subscriptions"]["audit"]["msgBacklog"] == 2 and stats["numberOfMessages"] == 2
    finally:
        _thawed(live, owner)


def test_owner_with_a_stale_heartbeat_is_not_asked(live):
    patient, settings = start_admin(live.database_url, lease_ttl_ms=2000, broker_request_timeout_ms=60000)
    admin = Admin(patient, live.database_url, settings)
    try:
        _, owner = _owned_topic_with_messages(live, admin, "st-stale")
        live.freeze(owner)
        try:
            admin.sql("UPDATE brokers SET heartbeat_at = now() - interval '10 seconds' WHERE broker_id = $1",
                      owner)
            started = time.monotonic()
            stats = admin.ok("GET", f"{P}/public/default/st-stale/stats")
            # Asking the frozen broker would have taken the whole 60 s request timeout.
            assert time.monotonic() - started < 20
            assert stats["liveStats"] is False and stats["publishers"] == []
            assert stats["ownerBroker"] == owner and stats["numberOfMessages"] == 2
        finally:
            _thawed(live, owner)
    finally:
        patient.stop()


def test_owner_that_says_not_owner_leaves_database_stats(live, live_admin):
    admin = live_admin
    admin.ok("PUT", f"{P}/public/default/st-moved")
    topic_id = _log(admin, "persistent://public/default/st-moved", [1, 3])
    _cursor(admin, topic_id, "fresh", -1, {})
    # The lease names a live broker that never loaded the topic: it answers NotOwner.
    own(admin.database_url, "persistent://public/default/st-moved", "broker-0", epoch=9)
    stats = admin.ok("GET", f"{P}/public/default/st-moved/stats")
    assert stats["liveStats"] is False and stats["ownerBroker"] == "broker-0"
    assert stats["subscriptions"]["fresh"]["msgBacklog"] == 4
    status, answer = http("GET", live.url("broker-0") + "/internal/v1/topic-stats?topic="
                          "persistent://public/default/st-moved")
    assert (status, answer["code"]) == (409, "NotOwner")


def test_partitioned_stats_sum_the_partitions(live, live_admin):
    admin = live_admin
    admin.ok("PUT", f"{P}/public/default/st-orders/partitions", 2)
    part = [f"persistent://public/default/st-orders-partition-{i}" for i in range(2)]
    _cursor(admin, _log(admin, part[0], [1, 1, 1]), "audit", 0, {})  # unowned: database only
    client = _client(live)
    try:
        producer = client.create_producer(part[1], producer_name="p", batching_enabled=False)
        consumer = client.subscribe(part[1], "audit", consumer_type=magnetar.ConsumerType.Shared,
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer.send(b"x")
        producer.send(b"y")
        first = consumer.receive(timeout_millis=10000)
        consumer.receive(timeout_millis=10000)
        consumer.acknowledge(first)
        path = f"{P}/public/default/st-orders/partitioned-stats"
        stats = until(lambda: (lambda st: st if st["subscriptions"]["audit"]["msgBacklog"] == 2 + 1 else None)(
            admin.ok("GET", path)), "the ack to reach the backlog")
        assert stats["metadata"] == {"partitions": 2}
        assert stats["numberOfMessages"] == 5 and stats["msgInCounter"] == 2
        parts = stats["partitions"]
        assert sorted(parts) == part
        assert stats["storageSize"] == sum(p["storageSize"] for p in parts.values())
        assert parts[part[0]]["storageSize"] == 30 and parts[part[0]]["liveStats"] is False
        assert parts[part[1]]["liveStats"] is True
        audit = stats["subscriptions"]["audit"]
        assert audit["type"] == "Shared" and audit["unackedMessages"] == 1 and len(audit["consumers"]) == 1
        assert [p["producerName"] for p in stats["publishers"]] == ["p"]
        assert admin.ok("GET", path + "?perPartition=false")["partitions"] == {}
        internal = admin.ok("GET", f"{P}/public/default/st-orders/partitioned-internalStats")
        assert internal["metadata"] == {"partitions": 2}
        assert internal["partitions"][part[1]]["lastConfirmedEntry"] == "1:-1"
        assert internal["partitions"][part[1]]["ownerBroker"] == live.owner_of(part[1])
    finally:
        client.close()


def test_stats_refusals(admin):
    admin.ok("PUT", f"{P}/public/default/orders/partitions", 2)
    admin.ok("PUT", f"{P}/public/default/solo")
    assert "missing" in admin.refused("GET", f"{P}/public/default/missing/stats", status=404, code="TopicNotFound")
    assert "missing" in admin.refused("GET", f"{P}/public/default/missing/internalStats", status=404)
    reason = admin.refused("GET", f"{P}/public/default/orders/stats", status=404)
    assert "partitioned topic with 2 partitions" in reason and "partitioned-stats" in reason
    assert "not a partitioned topic" in admin.refused("GET", f"{P}/public/default/solo/partitioned-stats",
                                                      status=404)
    assert "missing" in admin.refused("GET", f"{P}/public/default/missing/partitioned-stats", status=404)
    assert "missing" in admin.refused("GET", f"{P}/public/default/missing/partitioned-internalStats", status=404)
    assert "perPartition" in admin.refused("GET", f"{P}/public/default/orders/partitioned-stats?perPartition=x",
                                           status=400)
    assert "persistent://public/nope/t" in admin.refused("GET", f"{P}/public/nope/t/stats", status=404)


def test_cursor_shapes_rules():
    from magnetar_admin import stats as shapes
    from magnetar_protocol.cursorstate import acked_beyond

    acks = {5: shapes.WHOLE, 6: shapes.WHOLE, 8: shapes.WHOLE, 9: 0b101, 3: shapes.WHOLE}
    assert shapes.deleted_ranges_text(acks) == "[(2:-1..3:-1], (4:-1..6:-1], (7:-1..8:-1]]"
    assert shapes.batch_deleted_indexes(acks) == {"9": [0, 2]}
    # A 16 MB mask (an ack of batch index 2^27, stored before brokers bounded it) is
    # listed in one scan, not bit by bit (which pinned the admin for minutes).
    assert shapes.batch_deleted_indexes({4: 1 << (1 << 27) | 1}) == {"4": [0, 1 << 27]}
    # entry 3 is at or before the mark-delete position; entry 9 holds 2 messages only;
    # entry 8 is not in the log any more
    assert acked_beyond(4, acks, {3: 1, 5: 2, 6: 1, 9: 2}) == 2 + 1 + 2
