"""Topic stats: backlog and storage from the database (entries after each subscription's
mark-delete position, minus what was acknowledged individually), live parts from the
owning broker when a live one answers, the database alone otherwise."""

from magnetar_protocol import magnetar_pb2 as pb

from tests.integration.admin.conftest import FakeBroker, own

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


def test_live_parts_come_from_the_owning_broker(admin, fake_broker):
    _solo_with_log(admin)
    own(admin.database_url, SOLO, fake_broker.broker_id, epoch=9)
    fake_broker.stats[SOLO] = {
        "msgInCounter": 41, "bytesInCounter": 410, "msgOutCounter": 12, "accessMode": "Exclusive",
        "exclusiveProducer": "p1", "topicEpoch": 3, "waitingProducers": ["p2"], "deduplicationEnabled": True,
        "publishers": [{"producerName": "p1", "producerId": 1, "accessMode": "Exclusive", "msgInCounter": 41}],
        "subscriptions": {
            "audit": {"type": "Failover", "unackedMessages": 2, "backlogEntries": 99,
                      "consumers": [{"consumerName": "c1", "isActive": True, "msgOutCounter": 12}]},
            "reader-1": {"type": "Exclusive", "durable": False, "backlogEntries": 4, "consumers": []},
        },
    }
    stats = admin.ok("GET", f"{P}/public/default/solo/stats")
    assert ("GET", f"/internal/v1/topic-stats?topic={SOLO}") in fake_broker.requests
    assert stats["liveStats"] is True and stats["ownerBroker"] == fake_broker.broker_id
    assert (stats["msgInCounter"], stats["bytesInCounter"], stats["msgOutCounter"]) == (41, 410, 12)
    assert stats["accessMode"] == "Exclusive" and stats["exclusiveProducer"] == "p1"
    assert stats["topicEpoch"] == 3 and stats["waitingProducers"] == ["p2"] and stats["waitingPublishers"] == 1
    assert stats["deduplicationStatus"] == "Enabled"
    assert [p["producerName"] for p in stats["publishers"]] == ["p1"]
    audit = stats["subscriptions"]["audit"]
    assert audit["type"] == "Failover" and audit["activeConsumerName"] == "c1"
    assert audit["msgBacklog"] == 2  # the database's count, not the broker's entry count
    assert audit["unackedMessages"] == 2 and audit["msgOutCounter"] == 12
    assert stats["subscriptions"]["reader-1"]["isDurable"] is False
    assert stats["subscriptions"]["fresh"]["consumers"] == []
    internal = admin.ok("GET", f"{P}/public/default/solo/internalStats")
    assert internal["ownerBrokerUrl"] == fake_broker.url and internal["ownerEpoch"] == 9


def test_owner_that_does_not_answer_leaves_database_stats(admin, database_url):
    _solo_with_log(admin)
    gone = FakeBroker(database_url, "gone-broker")
    gone.close()  # registered and heartbeating in the database, but nothing listens
    own(database_url, SOLO, "gone-broker")
    stats = admin.ok("GET", f"{P}/public/default/solo/stats")
    assert stats["liveStats"] is False and stats["ownerBroker"] == "gone-broker"
    assert stats["subscriptions"]["audit"]["msgBacklog"] == 2


def test_owner_that_says_not_owner_leaves_database_stats(admin, fake_broker):
    _solo_with_log(admin)
    own(admin.database_url, SOLO, fake_broker.broker_id)  # fake_broker.stats is empty: 409 NotOwner
    stats = admin.ok("GET", f"{P}/public/default/solo/stats")
    assert fake_broker.requests and stats["liveStats"] is False
    assert stats["subscriptions"]["fresh"]["msgBacklog"] == 8


def test_owner_with_a_stale_heartbeat_is_not_asked(admin, fake_broker):
    _solo_with_log(admin)
    own(admin.database_url, SOLO, fake_broker.broker_id)
    admin.sql("UPDATE brokers SET heartbeat_at = now() - interval '10 seconds'")
    fake_broker.stats[SOLO] = {"publishers": [{"producerName": "ghost"}], "subscriptions": {}}
    stats = admin.ok("GET", f"{P}/public/default/solo/stats")
    assert fake_broker.requests == [] and stats["publishers"] == [] and stats["liveStats"] is False


def test_partitioned_stats_sum_the_partitions(admin, fake_broker):
    admin.ok("PUT", f"{P}/public/default/orders/partitions", 2)
    for i, sizes in enumerate(([1, 1, 1], [2, 2])):
        topic = f"persistent://public/default/orders-partition-{i}"
        _cursor(admin, _log(admin, topic, sizes), "audit", 0, {})
    own(admin.database_url, "persistent://public/default/orders-partition-1", fake_broker.broker_id)
    fake_broker.stats["persistent://public/default/orders-partition-1"] = {
        "msgInCounter": 4, "publishers": [{"producerName": "p"}],
        "subscriptions": {"audit": {"type": "Shared", "unackedMessages": 1, "consumers": [{"consumerName": "c"}]}}}
    stats = admin.ok("GET", f"{P}/public/default/orders/partitioned-stats")
    assert stats["metadata"] == {"partitions": 2}
    assert stats["storageSize"] == 50 and stats["numberOfMessages"] == 7 and stats["msgInCounter"] == 4
    audit = stats["subscriptions"]["audit"]
    assert audit["msgBacklog"] == 2 + 2  # after entry 0 of each partition
    assert audit["type"] == "Shared" and audit["unackedMessages"] == 1 and len(audit["consumers"]) == 1
    assert [p["producerName"] for p in stats["publishers"]] == ["p"]
    parts = stats["partitions"]
    assert sorted(parts) == [f"persistent://public/default/orders-partition-{i}" for i in range(2)]
    assert parts["persistent://public/default/orders-partition-1"]["liveStats"] is True
    assert parts["persistent://public/default/orders-partition-0"]["storageSize"] == 30
    assert admin.ok("GET", f"{P}/public/default/orders/partitioned-stats?perPartition=false")["partitions"] == {}
    internal = admin.ok("GET", f"{P}/public/default/orders/partitioned-internalStats")
    assert internal["metadata"] == {"partitions": 2}
    assert internal["partitions"]["persistent://public/default/orders-partition-1"]["lastConfirmedEntry"] == "1:-1"
    assert internal["partitions"]["persistent://public/default/orders-partition-1"]["ownerBroker"] == \
        fake_broker.broker_id


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

    acks = {5: shapes.WHOLE, 6: shapes.WHOLE, 8: shapes.WHOLE, 9: 0b101, 3: shapes.WHOLE}
    assert shapes.deleted_ranges_text(acks) == "[(2:-1..3:-1], (4:-1..6:-1], (7:-1..8:-1]]"
    assert shapes.batch_deleted_indexes(acks) == {"9": [0, 2]}
    # entry 3 is at or before the mark-delete position; entry 9 holds 2 messages only;
    # entry 8 is not in the log any more
    assert shapes.acked_beyond(acks, 4, {3: 1, 5: 2, 6: 1, 9: 2}) == 2 + 1 + 2
