"""Topics over HTTP against a real database: creation (rows, leases), listing, metadata,
deletion with fencing before the owner is told to unload, subscriptions; every refusal
with its reason and an unchanged database."""

import pytest

import magnetar
from tests.integration.admin.conftest import Admin, http, own, run_sql, start_admin, until

# Real brokers own the topics of the delete tests (one cluster for the module; tests use
# their own topics).
LIVE_CLUSTER = {"brokers": 2, "coordinators": 0, "registry": False, "admin": False}

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
    # A topic not created yet is "not partitioned", as Pulsar answers a client that asks
    # before it produces (issue 29); 404 only when it would not be created on use.
    assert admin.ok("GET", f"{P}/public/default/missing/partitions") == {"partitions": 0}
    assert admin.ok("GET", f"{P}/public/default/missing/partitions?checkAllowAutoCreation=true") == {
        "partitions": 0}


def test_partitions_of_a_missing_topic_is_404_when_topics_are_not_auto_created(database_url):
    server, settings = start_admin(database_url, allow_auto_topic_creation=False)
    try:
        admin = Admin(server, database_url, settings)
        path = f"{P}/public/default/missing/partitions"
        assert admin.ok("GET", path) == {"partitions": 0}
        assert "missing" in admin.refused("GET", path + "?checkAllowAutoCreation=true", status=404,
                                          code="TopicNotFound")
    finally:
        server.stop()


def test_a_partition_row_in_the_way_rolls_the_whole_creation_back(admin):
    # A partition name that exists as a topic (e.g. auto-created by a broker).
    admin.sql("INSERT INTO topics (topic, tenant, namespace) VALUES "
              "('persistent://public/default/late-partition-1', 'public', 'default')")
    reason = admin.refused("PUT", f"{P}/public/default/late/partitions", 3, status=409)
    assert "persistent://public/default/late" in reason
    assert admin.sql("SELECT count(*) AS n FROM partitioned_topics") == [{"n": 0}]


ADMIN_APP = "admin-under-test"


@pytest.fixture
def traced_admin(live):
    """The admin service on the live database, its sessions named ADMIN_APP, and a
    trigger that records every change of a lease row with the name of the session that
    made it (the brokers' sessions have no name): who took a lease away, and when."""
    for statement in (
            "CREATE TABLE IF NOT EXISTS lease_trail (n bigserial, topic_id bigint, app text, "
            "old_broker text, new_broker text, old_epoch bigint, new_epoch bigint)",
            "CREATE OR REPLACE FUNCTION record_lease() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO lease_trail (topic_id, app, old_broker, new_broker, old_epoch, new_epoch) VALUES "
            "(NEW.topic_id, current_setting('application_name'), OLD.broker_id, NEW.broker_id, OLD.epoch, "
            "NEW.epoch); RETURN NEW; END $$",
            "CREATE OR REPLACE TRIGGER lease_trail AFTER UPDATE ON topic_owners "
            "FOR EACH ROW EXECUTE FUNCTION record_lease()"):
        run_sql(live.database_url, statement)
    # asyncpg passes unknown DSN parameters on as server settings.
    server, settings = start_admin(f"{live.database_url}?application_name={ADMIN_APP}",
                                   lease_ttl_ms=2000, broker_request_timeout_ms=1000)
    yield Admin(server, live.database_url, settings)
    server.stop()


def _trail_mark(admin) -> int:
    return admin.sql("SELECT coalesce(max(n), 0) AS n FROM lease_trail")[0]["n"]


def _trail(admin, topic_id: int, after: int) -> list[dict]:
    return admin.sql("SELECT app, old_broker, new_broker FROM lease_trail WHERE topic_id = $1 AND n > $2 "
                     "ORDER BY n", topic_id, after)


def _served(live, broker: str) -> list[str]:
    return http("GET", live.url(broker) + "/internal/v1/owned-topics")[1]["topics"]


def _owned(live, topics: list[str], subscription: str | None = None) -> dict[str, str]:
    """Each topic written once (and subscribed) by a real client, then left without
    clients; returns {topic: owning broker}."""
    client = magnetar.Client(",".join(live.broker_urls))
    try:
        for topic in topics:
            if subscription:
                client.subscribe(topic, subscription).close()
            producer = client.create_producer(topic, producer_name="p")
            producer.send(b"x")
            producer.close()
    finally:
        client.close()
    return {t: until(lambda t=t: live.owner_of(t), f"an owner of {t}") for t in topics}


def test_delete_fences_the_lease_before_the_owner_is_asked_to_unload(live, traced_admin):
    admin = traced_admin
    admin.ok("PUT", f"{P}/public/default/tp-orders/partitions", 2)
    parts = [f"persistent://public/default/tp-orders-partition-{i}" for i in range(2)]
    owners = _owned(live, parts, subscription="s")
    ids = {r["topic"]: r["topic_id"] for r in admin.sql("SELECT topic, topic_id FROM topics WHERE topic = ANY($1)",
                                                         parts)}
    mark = _trail_mark(admin)
    assert admin.call("DELETE", f"{P}/public/default/tp-orders/partitions") == (204, None)
    for topic, broker in owners.items():
        until(lambda topic=topic, broker=broker: topic not in _served(live, broker),
              f"{broker} to stop serving {topic}")
        trail = _trail(admin, ids[topic], mark)
        # The admin service took the lease from the broker first, so the broker's own
        # release (compare-and-set on its epoch) found nothing left to release.
        assert trail[0] == {"app": ADMIN_APP, "old_broker": broker, "new_broker": None}, trail
        assert all(row["app"] == ADMIN_APP for row in trail), trail
    for table in ("partitioned_topics", "topics", "topic_owners", "entries", "producer_sequences",
                  "subscriptions"):
        assert admin.sql(f"SELECT count(*) AS n FROM {table} WHERE "
                         + ("topic = 'persistent://public/default/tp-orders'" if table == "partitioned_topics"
                            else "topic_id = ANY($1)"),
                         *([] if table == "partitioned_topics" else [list(ids.values())])) == [{"n": 0}], table
    # Gone: a deleted topic reads as one never made (not partitioned, created on use).
    assert admin.ok("GET", f"{P}/public/default/tp-orders/partitions") == {"partitions": 0}
    assert "tp-orders" in admin.refused("GET", f"{P}/public/default/tp-orders/stats", status=404)


def test_delete_refuses_while_clients_are_connected_unless_forced(live, live_admin):
    admin, topic = live_admin, "persistent://public/default/tp-busy"
    admin.ok("PUT", f"{P}/public/default/tp-busy")
    client = magnetar.Client(",".join(live.broker_urls))
    try:
        producer = client.create_producer(topic, producer_name="p1")
        client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared)
        producer.send(b"before")
        owner = live.owner_of(topic)
        reason = admin.refused("DELETE", f"{P}/public/default/tp-busy", status=409, code="Conflict")
        assert "1 connected producer(s) and 1 consumer(s)" in reason and "force=true" in reason
        assert topic in _served(live, owner)  # nobody was told to unload
        producer.send(b"still served")
        assert admin.call("DELETE", f"{P}/public/default/tp-busy?force=true") == (204, None)
        until(lambda: topic not in _served(live, owner), f"{owner} to let {topic} go")
        assert topic not in admin.ok("GET", f"{P}/public/default")
    finally:
        client.close()


def _frozen_owner(live, admin, local: str, heartbeat: str):
    """A topic whose owner is then frozen, its heartbeat set to ``heartbeat``."""
    topic = f"persistent://public/default/{local}"
    admin.ok("PUT", f"{P}/public/default/{local}")
    owner = _owned(live, [topic])[topic]
    live.freeze(owner)
    admin.sql(f"UPDATE brokers SET heartbeat_at = {heartbeat} WHERE broker_id = $1", owner)
    return topic, owner


def _thaw(live, broker: str) -> None:
    live.thaw(broker)  # its next heartbeat writes now() over the test's value
    until(lambda: http("GET", live.url(broker) + "/readyz")[0] == 200, f"{broker} to answer again")


def test_delete_refuses_when_a_live_owner_does_not_answer_unless_forced(live, live_admin):
    admin = live_admin
    # Frozen within its lease (the heartbeat an hour ahead, so a slow machine cannot
    # let it expire): it may still have clients, so only --force deletes.
    topic, owner = _frozen_owner(live, admin, "tp-silent", "now() + interval '1 hour'")
    try:
        reason = admin.refused("DELETE", f"{P}/public/default/tp-silent", status=409)
        assert owner in reason and "did not answer" in reason and "force=true" in reason
        admin.ok("DELETE", f"{P}/public/default/tp-silent?force=true")
        assert admin.sql("SELECT count(*) AS n FROM topics WHERE topic = $1", topic) == [{"n": 0}]
    finally:
        _thaw(live, owner)


def test_delete_when_the_owner_says_it_does_not_own_the_topic(live, live_admin):
    admin, topic = live_admin, "persistent://public/default/tp-moved"
    admin.ok("PUT", f"{P}/public/default/tp-moved")
    own(admin.database_url, topic, "broker-0")  # a live broker that never loaded it: NotOwner
    admin.ok("DELETE", f"{P}/public/default/tp-moved")
    assert admin.sql("SELECT count(*) AS n FROM topics WHERE topic = $1", topic) == [{"n": 0}]


def test_delete_of_a_topic_owned_by_a_dead_broker_does_not_call_it(live, live_admin):
    admin = live_admin
    # Its lease is stale: the admin service must not wait for it (asked, the frozen
    # broker would not answer and the delete would be refused as above).
    topic, owner = _frozen_owner(live, admin, "tp-orphan", "now() - interval '1 minute'")
    try:
        admin.ok("DELETE", f"{P}/public/default/tp-orphan")
        assert admin.sql("SELECT count(*) AS n FROM topics WHERE topic = $1", topic) == [{"n": 0}]
    finally:
        _thaw(live, owner)


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


def test_deleting_a_subscription_of_an_owned_topic_fences_it_and_unloads(live, traced_admin):
    admin, topic = traced_admin, "persistent://public/default/tp-served"
    admin.ok("PUT", f"{P}/public/default/tp-served")
    owner = _owned(live, [topic])[topic]
    client = magnetar.Client(",".join(live.broker_urls))
    try:
        consumer = client.subscribe(topic, "s")
        reason = admin.refused("DELETE", f"{P}/public/default/tp-served/subscription/s", status=409)
        assert "'s'" in reason and "1 connected consumer(s)" in reason
        consumer.close()
    finally:
        client.close()
    (topic_id,) = [r["topic_id"] for r in admin.sql("SELECT topic_id FROM topics WHERE topic = $1", topic)]
    mark = _trail_mark(admin)
    admin.ok("DELETE", f"{P}/public/default/tp-served/subscription/s")
    assert admin.sql("SELECT count(*) AS n FROM subscriptions WHERE topic_id = $1", topic_id) == [{"n": 0}]
    # The broker held the cursor in memory: the lease is taken from it (by the admin
    # service) and it stops serving, so no client finds the old cursor.
    until(lambda: topic not in _served(live, owner), f"{owner} to stop serving {topic}")
    trail = _trail(admin, topic_id, mark)
    assert trail[0] == {"app": ADMIN_APP, "old_broker": owner, "new_broker": None}, trail


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
