"""Topics over HTTP against a real database: creation (rows, leases), listing, metadata,
deletion with fencing before the owner is told to unload, subscriptions; every refusal
with its reason and an unchanged database."""

from tests.integration.admin.conftest import FakeBroker, own

P = "/admin/v2/persistent"
NS = "/admin/v2/namespaces"


def test_create_partitioned_topic_writes_metadata_partitions_and_unowned_leases(admin):
    assert admin.call("PUT", f"{P}/public/default/orders/partitions", 3) == (204, None)
    assert admin.sql("SELECT topic, tenant, namespace, partitions FROM partitioned_topics") == [
        {"topic": "persistent://public/default/orders", "tenant": "public", "namespace": "default",
         "partitions": 3}]
    rows = admin.sql("SELECT t.topic, t.partition_index, o.broker_id, o.epoch FROM topics t "
                     "JOIN topic_owners o USING (topic_id) ORDER BY t.partition_index")
    assert rows == [{"topic": f"persistent://public/default/orders-partition-{i}", "partition_index": i,
                     "broker_id": None, "epoch": 0} for i in range(3)]
    assert admin.ok("GET", f"{P}/public/default/orders/partitions") == {"partitions": 3}
    assert admin.ok("GET", f"{P}/public/default/partitioned") == ["persistent://public/default/orders"]
    listed = [f"persistent://public/default/orders-partition-{i}" for i in range(3)]
    assert admin.ok("GET", f"{P}/public/default") == listed
    assert admin.ok("GET", f"{NS}/public/default/topics") == listed


def test_partition_count_may_be_an_object_or_a_form_encoded_integer(admin):
    admin.ok("PUT", f"{P}/public/default/a/partitions", {"partitions": 2})
    admin.ok("PUT", f"{P}/public/default/b/partitions", raw=b"5")  # curl -d 5
    assert admin.ok("GET", f"{P}/public/default/a/partitions") == {"partitions": 2}
    assert admin.ok("GET", f"{P}/public/default/b/partitions") == {"partitions": 5}


def test_create_non_partitioned_topic(admin):
    assert admin.call("PUT", f"{P}/public/default/solo") == (204, None)
    assert admin.sql("SELECT t.topic, t.partition_index, o.broker_id FROM topics t JOIN topic_owners o "
                     "USING (topic_id)") == [
        {"topic": "persistent://public/default/solo", "partition_index": -1, "broker_id": None}]
    assert admin.ok("GET", f"{P}/public/default/solo/partitions") == {"partitions": 0}
    assert admin.ok("GET", f"{P}/public/default") == ["persistent://public/default/solo"]
    assert admin.ok("GET", f"{P}/public/default/partitioned") == []


def test_create_refusals_change_nothing(admin):
    admin.ok("PUT", f"{P}/public/default/orders/partitions", 2)
    admin.ok("PUT", f"{P}/public/default/solo")
    path = f"{P}/public/default/new/partitions"
    for body, words in ((0, "at least 1"), (-3, "at least 1"), ("4", "integer"), (4.5, "integer"),
                        (True, "integer"), ({"partitions": 0}, "at least 1"), (None, "integer"),
                        ([4], "integer"), (4097, "limit 4096")):
        assert words in admin.refused("PUT", path, body, status=400, code="BadRequest"), body
    assert "partition count" in admin.refused("PUT", path, raw=b"", status=400)
    assert "not valid JSON" in admin.refused("PUT", path, raw=b"four", status=400)
    # conflicts, both ways
    assert "already exists" in admin.refused("PUT", f"{P}/public/default/orders/partitions", 2, status=409)
    assert "already exists" in admin.refused("PUT", f"{P}/public/default/orders", status=409)
    assert "already exists" in admin.refused("PUT", f"{P}/public/default/solo/partitions", 2, status=409)
    assert "already exists" in admin.refused("PUT", f"{P}/public/default/solo", status=409)
    # names
    reason = admin.refused("PUT", f"{P}/public/default/x-partition-1", status=400)
    assert "partition" in reason and "persistent://public/default/x" in reason
    assert "character" in admin.refused("PUT", f"{P}/public/default/bad%20name", status=400,
                                        code="InvalidTopicName")
    assert "255" in admin.refused("PUT", f"{P}/public/default/{'x' * 250}", status=400)
    # missing parents
    assert "public/nope" in admin.refused("PUT", f"{P}/public/nope/t", status=404, code="NamespaceNotFound")
    assert "nope/default" in admin.refused("PUT", f"{P}/nope/default/t/partitions", 2, status=404)
    assert "public/nope" in admin.refused("GET", f"{P}/public/nope", status=404)
    assert "public/nope" in admin.refused("GET", f"{P}/public/nope/partitioned", status=404)
    assert "missing" in admin.refused("GET", f"{P}/public/default/missing/partitions", status=404,
                                      code="TopicNotFound")


def test_a_partition_row_in_the_way_rolls_the_whole_creation_back(admin):
    # A partition name that exists as a topic (e.g. auto-created by a broker).
    admin.sql("INSERT INTO topics (topic, tenant, namespace) VALUES "
              "('persistent://public/default/late-partition-1', 'public', 'default')")
    reason = admin.refused("PUT", f"{P}/public/default/late/partitions", 3, status=409)
    assert "persistent://public/default/late" in reason
    assert admin.sql("SELECT count(*) AS n FROM partitioned_topics") == [{"n": 0}]


def test_delete_fences_the_lease_before_the_owner_is_asked_to_unload(admin, fake_broker):
    admin.ok("PUT", f"{P}/public/default/orders/partitions", 2)
    for i in range(2):
        topic_id = own(admin.database_url, f"persistent://public/default/orders-partition-{i}",
                       fake_broker.broker_id, epoch=5)
        admin.sql("INSERT INTO entries VALUES ($1, 0, 'p', 0, 0, 1, 0, 'x')", topic_id)
        admin.sql("INSERT INTO producer_sequences (topic_id, producer_name, last_sequence_id) "
                  "VALUES ($1, 'p', 0)", topic_id)
        admin.sql("INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry) VALUES ($1, 's', -1)",
                  topic_id)
    fake_broker.on_unload = lambda topic: admin.sql(
        "SELECT o.broker_id, o.epoch FROM topic_owners o JOIN topics t USING (topic_id) WHERE t.topic = $1",
        topic)
    assert admin.call("DELETE", f"{P}/public/default/orders/partitions") == (204, None)
    unloads = sorted(r for r in fake_broker.requests if r[0] == "POST")
    assert unloads == [("POST", f"/internal/v1/unload?topic=persistent://public/default/orders-partition-{i}")
                       for i in range(2)]
    # When the broker heard of it, its lease was already gone and the epoch had moved on.
    assert fake_broker.unload_observations == [[{"broker_id": None, "epoch": 6}]] * 2
    for table in ("partitioned_topics", "topics", "topic_owners", "entries", "producer_sequences",
                  "subscriptions"):
        assert admin.sql(f"SELECT count(*) AS n FROM {table}") == [{"n": 0}], table
    assert "orders" in admin.refused("GET", f"{P}/public/default/orders/partitions", status=404)


def test_delete_refuses_while_clients_are_connected_unless_forced(admin, fake_broker):
    admin.ok("PUT", f"{P}/public/default/busy")
    own(admin.database_url, "persistent://public/default/busy", fake_broker.broker_id)
    fake_broker.stats["persistent://public/default/busy"] = {
        "publishers": [{"producerName": "p1"}], "subscriptions": {"s": {"type": "Shared", "consumers": [{}]}}}
    reason = admin.refused("DELETE", f"{P}/public/default/busy", status=409, code="Conflict")
    assert "1 connected producer(s) and 1 consumer(s)" in reason and "force=true" in reason
    assert not [r for r in fake_broker.requests if r[0] == "POST"]  # nobody was told to unload
    assert admin.call("DELETE", f"{P}/public/default/busy?force=true") == (204, None)
    assert ("POST", "/internal/v1/unload?topic=persistent://public/default/busy") in fake_broker.requests
    assert admin.ok("GET", f"{P}/public/default") == []


def test_delete_refuses_when_a_live_owner_does_not_answer_unless_forced(admin, database_url):
    admin.ok("PUT", f"{P}/public/default/silent")
    mute = FakeBroker(database_url, "mute-broker")
    mute.close()  # its heartbeat is fresh in the database, but nothing listens
    own(database_url, "persistent://public/default/silent", "mute-broker")
    reason = admin.refused("DELETE", f"{P}/public/default/silent", status=409)
    assert "mute-broker" in reason and "did not answer" in reason and "force=true" in reason
    admin.ok("DELETE", f"{P}/public/default/silent?force=true")
    assert admin.sql("SELECT count(*) AS n FROM topics") == [{"n": 0}]


def test_delete_when_the_owner_says_it_does_not_own_the_topic(admin, fake_broker):
    admin.ok("PUT", f"{P}/public/default/moved")
    own(admin.database_url, "persistent://public/default/moved", fake_broker.broker_id)
    # fake_broker.stats has no entry for it: the broker answers 409 NotOwner, so no client is there
    admin.ok("DELETE", f"{P}/public/default/moved")
    assert admin.sql("SELECT count(*) AS n FROM topics") == [{"n": 0}]


def test_delete_of_a_topic_owned_by_a_dead_broker_does_not_call_it(admin, fake_broker):
    admin.ok("PUT", f"{P}/public/default/orphan")
    own(admin.database_url, "persistent://public/default/orphan", fake_broker.broker_id)
    admin.sql("UPDATE brokers SET heartbeat_at = now() - interval '1 minute'")
    admin.ok("DELETE", f"{P}/public/default/orphan")
    assert fake_broker.requests == []
    assert admin.sql("SELECT count(*) AS n FROM topics") == [{"n": 0}]


def test_delete_refusals_change_nothing(admin):
    admin.ok("PUT", f"{P}/public/default/orders/partitions", 2)
    admin.ok("PUT", f"{P}/public/default/solo")
    reason = admin.refused("DELETE", f"{P}/public/default/orders", status=409)
    assert "partitioned topic with 2 partitions" in reason and "/partitions" in reason
    reason = admin.refused("DELETE", f"{P}/public/default/orders-partition-0", status=409)
    assert "partition of persistent://public/default/orders" in reason
    assert "solo" in admin.refused("DELETE", f"{P}/public/default/solo/partitions", status=404)
    assert "missing" in admin.refused("DELETE", f"{P}/public/default/missing", status=404, code="TopicNotFound")
    assert "missing" in admin.refused("DELETE", f"{P}/public/default/missing/partitions", status=404)
    assert "force" in admin.refused("DELETE", f"{P}/public/default/solo?force=perhaps", status=400)
    admin.ok("DELETE", f"{P}/public/default/solo")
    assert admin.ok("GET", f"{P}/public/default") == [
        f"persistent://public/default/orders-partition-{i}" for i in range(2)]


def _subscribe(admin, topic: str, subscription: str) -> None:
    admin.sql("INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry) "
              "SELECT topic_id, $2, -1 FROM topics WHERE topic = $1", topic, subscription)


def test_subscriptions_are_listed_over_partitions_and_deleted_everywhere(admin):
    admin.ok("PUT", f"{P}/public/default/orders/partitions", 2)
    _subscribe(admin, "persistent://public/default/orders-partition-0", "audit")
    _subscribe(admin, "persistent://public/default/orders-partition-1", "audit")
    _subscribe(admin, "persistent://public/default/orders-partition-1", "billing")
    assert admin.ok("GET", f"{P}/public/default/orders/subscriptions") == ["audit", "billing"]
    assert admin.ok("GET", f"{P}/public/default/orders-partition-0/subscriptions") == ["audit"]
    assert admin.call("DELETE", f"{P}/public/default/orders/subscription/audit") == (204, None)
    assert admin.sql("SELECT subscription FROM subscriptions") == [{"subscription": "billing"}]
    # Nobody owned the partitions: their leases are untouched.
    assert admin.sql("SELECT DISTINCT epoch FROM topic_owners") == [{"epoch": 0}]


def test_deleting_a_subscription_of_an_owned_topic_fences_it_and_unloads(admin, fake_broker):
    admin.ok("PUT", f"{P}/public/default/served")
    own(admin.database_url, "persistent://public/default/served", fake_broker.broker_id, epoch=3)
    _subscribe(admin, "persistent://public/default/served", "s")
    fake_broker.stats["persistent://public/default/served"] = {
        "publishers": [], "subscriptions": {"s": {"type": "Exclusive", "consumers": [{"consumerName": "c"}]}}}
    reason = admin.refused("DELETE", f"{P}/public/default/served/subscription/s", status=409)
    assert "'s'" in reason and "1 connected consumer(s)" in reason
    admin.ok("DELETE", f"{P}/public/default/served/subscription/s?force=true")
    assert admin.sql("SELECT count(*) AS n FROM subscriptions") == [{"n": 0}]
    assert admin.sql("SELECT broker_id, epoch FROM topic_owners") == [{"broker_id": None, "epoch": 4}]
    assert ("POST", "/internal/v1/unload?topic=persistent://public/default/served") in fake_broker.requests


def test_subscription_refusals_change_nothing(admin):
    admin.ok("PUT", f"{P}/public/default/solo")
    _subscribe(admin, "persistent://public/default/solo", "s")
    reason = admin.refused("DELETE", f"{P}/public/default/solo/subscription/other", status=404,
                           code="SubscriptionNotFound")
    assert "'other'" in reason and "persistent://public/default/solo" in reason
    assert "missing" in admin.refused("GET", f"{P}/public/default/missing/subscriptions", status=404)
    assert "missing" in admin.refused("DELETE", f"{P}/public/default/missing/subscription/s", status=404)
    assert "subscription name" in admin.refused("DELETE", f"{P}/public/default/solo/subscription/a%20b",
                                                status=400)


def test_concurrent_creations_of_one_topic_make_exactly_one(admin):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: admin.call("PUT", f"{P}/public/default/race/partitions", 4)[0],
                                range(8)))
    assert sorted(answers) == [204] + [409] * 7
    assert admin.sql("SELECT count(*) AS n FROM topics") == [{"n": 4}]
    assert admin.sql("SELECT count(*) AS n FROM topic_owners") == [{"n": 4}]
