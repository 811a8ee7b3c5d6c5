"""Issue #16, storage lifecycle end to end: trimming keeps what a durable subscription has
not acknowledged, what retention protects and what an open transaction's ack holds;
readers and subscriptions from Earliest start at the first retained entry; messageTTL,
expire-messages and the three backlog-quota policies; the policy REST API refuses bad
input; a broker SIGKILLed between trim batches loses nothing and its successor resumes.

One cluster for the module (a short lifecycle interval and no policy cache, via env);
each test uses its own topics.  "Nothing more was trimmed" is checked after two further
complete lifecycle passes (the broker's magnetar_broker_lifecycle_passes_total), never
after a sleep.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import SHIPPED_RETENTION, admin, two_more_passes
from tests.waiting import wait_until

LIFECYCLE_ENV = {
    **SHIPPED_RETENTION,  # Pulsar's default (TEST_ENV keeps everything)
    # No minimum age: these tests watch trimming act on data seconds old (the floor's
    # own tests, test_trim_floor_e2e.py, keep the default).
    "MAGNETAR_TRIM_MIN_AGE_S": "0",
    "MAGNETAR_LIFECYCLE_INTERVAL_MS": "150",
    "MAGNETAR_STORAGE_POLICY_CACHE_MS": "0",
    "MAGNETAR_TRIM_BATCH_ENTRIES": "4",  # several batches per pass: the batching runs too
    "MAGNETAR_BACKLOG_QUOTA_HOLD_MAX_MS": "15000",
}
NS = "public/default"
pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster, pytest.mark.cluster(brokers=1, env=LIFECYCLE_ENV)]


@pytest.fixture(scope="module")
def lc(module_cluster):
    return module_cluster


@pytest.fixture(scope="module")
def mclient(lc):
    c = magnetar.Client(",".join(lc.broker_urls))
    yield c
    c.close()


# ---------------------------------------------------------------- helpers

def full(topic: str) -> str:
    return f"persistent://{NS}/{topic}"


def ok(cluster, method: str, path: str, body=None):
    status, answer = admin(cluster, method, path, body)
    assert status in (200, 204), (method, path, status, answer)
    return answer


def create(cluster, topic: str) -> None:
    """A topic-level policy needs its topic: create it (409 when it exists already)."""
    assert admin(cluster, "PUT", f"/admin/v2/persistent/public/default/{topic}")[0] in (204, 409)


def sql(cluster, query: str, *args):
    async def run():
        conn = await asyncpg.connect(cluster.database_url)
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()
    return asyncio.run(run())


def stored(cluster, topic: str) -> list[int]:
    """Entry ids of the topic still in the database."""
    return [r[0] for r in sql(cluster, "SELECT e.entry_id FROM entries e JOIN topics t USING (topic_id) "
                                       "WHERE t.topic = $1 ORDER BY 1", full(topic))]


def produce(client, topic: str, n: int, prefix: str = "m") -> list:
    producer = client.create_producer(topic, batching_enabled=False)  # one entry per message
    ids = [producer.send(f"{prefix}{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def receive(consumer, n: int) -> list:
    return [consumer.receive(timeout_millis=5000) for _ in range(n)]


# ---------------------------------------------------------------- trimming rules

def test_trimming_removes_only_what_every_subscription_acknowledged(lc, mclient):
    slow = mclient.subscribe("trim-acked", "slow", initial_position=magnetar.InitialPosition.Earliest)
    fast = mclient.subscribe("trim-acked", "fast", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "trim-acked", 20)
    for msg in receive(fast, 20):
        fast.acknowledge(msg)
    got = receive(slow, 20)
    for msg in got[:8]:
        slow.acknowledge(msg)
    slow.acknowledge(got[12])  # individually acked beyond a hole: must stay (hole 8..11)
    wait_until(lambda: stored(lc, "trim-acked")[:1] == [8], 10, "entries 0..7 trimmed",
               explain=lambda: stored(lc, "trim-acked"))
    two_more_passes(lc)
    assert stored(lc, "trim-acked") == list(range(8, 20))
    # What the slow subscription has not acknowledged is still delivered after a restart of its consumer.
    slow.close()
    again = mclient.subscribe("trim-acked", "slow")
    assert [m.data() for m in receive(again, 7)] == [f"m{i}".encode() for i in (8, 9, 10, 11, 13, 14, 15)]


def test_with_no_subscription_retention_alone_decides_and_earliest_starts_at_the_first_kept(lc, mclient):
    produce(mclient, "trim-nosub", 10)
    # Retention 0 (the broker default): everything but the newest entry goes.
    wait_until(lambda: stored(lc, "trim-nosub") == [9], 10, "entries 0..8 trimmed",
               explain=lambda: stored(lc, "trim-nosub"))
    reader = mclient.create_reader("trim-nosub", magnetar.MessageId.earliest)
    assert reader.read_next(timeout_millis=5000).data() == b"m9"
    sub = mclient.subscribe("trim-nosub", "late", initial_position=magnetar.InitialPosition.Earliest)
    first = sub.receive(timeout_millis=5000)
    assert first.data() == b"m9"
    sub.acknowledge(first)
    # The cursor starts at the first kept entry, so acknowledging it moves mark-delete
    # (a cursor left at -1 would wait forever for the trimmed 0..8).
    wait_until(lambda: sql(lc, "SELECT mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id) "
                               "WHERE t.topic = $1 AND s.subscription = 'late'", full("trim-nosub"))[0][0] == 9,
               10, "the late subscription's mark-delete at 9")
    produce(mclient, "trim-nosub", 1, prefix="after")
    assert sub.receive(timeout_millis=5000).data() == b"after0"  # the cursor moves on over the hole


def test_a_partition_owned_but_not_loaded_is_trimmed_too(lc, mclient):
    create(lc, "trim-unloaded")
    ok(lc, "POST", "/admin/v2/persistent/public/default/trim-unloaded/retention",
       {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    produce(mclient, "trim-unloaded", 10)
    # The broker gives the partition up (one broker: the lease is released) and takes it
    # back on a lookup alone, which assigns the owner without loading the partition.
    ok(lc, "PUT", "/admin/v2/persistent/public/default/trim-unloaded/unload")
    owners = ("SELECT o.broker_id FROM topic_owners o JOIN topics t USING (topic_id) WHERE t.topic = $1")
    assert sql(lc, owners, full("trim-unloaded"))[0][0] is None
    run, core = mclient._io.run, mclient._client.core
    run(core.call(lc.broker_urls[0], "/v1/topics/lookup", pb.LookupRequest(topic=full("trim-unloaded")),
                  pb.LookupResponse))
    assert sql(lc, owners, full("trim-unloaded"))[0][0] is not None
    two_more_passes(lc)
    assert stored(lc, "trim-unloaded") == list(range(10))  # retention still protects them
    ok(lc, "DELETE", "/admin/v2/persistent/public/default/trim-unloaded/retention")
    # No producer or consumer comes back: the loop must tend the owned partition itself.
    wait_until(lambda: stored(lc, "trim-unloaded") == [9], 10, "the unloaded partition trimmed",
               explain=lambda: stored(lc, "trim-unloaded"))


def test_retention_keeps_acknowledged_data_until_removed(lc, mclient):
    create(lc, "trim-retained")
    ok(lc, "POST", "/admin/v2/persistent/public/default/trim-retained/retention",
       {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    sub = mclient.subscribe("trim-retained", "s", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "trim-retained", 10)
    for msg in receive(sub, 10):
        sub.acknowledge(msg)
    wait_until(lambda: sql(lc, "SELECT mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id) "
                               "WHERE t.topic = $1", full("trim-retained"))[0][0] == 9, 10, "acks stored")
    two_more_passes(lc)
    assert stored(lc, "trim-retained") == list(range(10))
    reader = mclient.create_reader("trim-retained", magnetar.MessageId.earliest)  # entitled under retention
    assert reader.read_next(timeout_millis=5000).data() == b"m0"
    ok(lc, "DELETE", "/admin/v2/persistent/public/default/trim-retained/retention")
    wait_until(lambda: stored(lc, "trim-retained") == [9], 10, "trimmed once retention is removed",
               explain=lambda: stored(lc, "trim-retained"))


def test_an_ack_pending_in_an_open_transaction_keeps_its_entry(lc):
    client = magnetar.Client(",".join(lc.broker_urls))
    try:
        sub = client.subscribe("trim-txn", "s", initial_position=magnetar.InitialPosition.Earliest)
        produce(client, "trim-txn", 10)
        got = receive(sub, 10)
        txn = client.new_transaction()
        sub.acknowledge(got[3], txn=txn)
        sub.acknowledge_cumulative(got[9])  # moves mark-delete past the pending entry 3
        wait_until(lambda: sql(lc, "SELECT mark_delete_entry FROM subscriptions s JOIN topics t "
                                   "USING (topic_id) WHERE t.topic = $1", full("trim-txn"))[0][0] == 9,
                   10, "cumulative ack stored")
        wait_until(lambda: stored(lc, "trim-txn")[0] >= 3, 10, "entries 0..2 trimmed",
                   explain=lambda: stored(lc, "trim-txn"))
        two_more_passes(lc)
        assert stored(lc, "trim-txn") == list(range(3, 10))
        txn.abort()
        wait_until(lambda: stored(lc, "trim-txn") == [9], 10, "trimmed once the transaction ended",
                   explain=lambda: stored(lc, "trim-txn"))
    finally:
        client.close()


def test_a_trimmed_commit_marker_takes_its_transaction_buffer_rows(lc, mclient):
    sub = mclient.subscribe("trim-marker", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = mclient.create_producer("trim-marker", batching_enabled=False)
    txn = mclient.new_transaction()
    for i in range(3):
        producer.send(f"t{i}".encode(), txn=txn)
    txn.commit()
    producer.send(b"plain")
    for msg in receive(sub, 4):
        sub.acknowledge(msg)
    buffered = ("SELECT count(*) FROM txn_entries x JOIN topics t USING (topic_id) WHERE t.topic = $1")
    wait_until(lambda: sql(lc, buffered, full("trim-marker"))[0][0] == 0, 10,
               "the marker's buffered batches deleted with it")
    assert stored(lc, "trim-marker") == [1]


OUTCOMES = ("SELECT count(*) FROM txn_outcomes o JOIN topics t USING (topic_id) "
            "WHERE t.topic = $1 AND o.txn_most = $2 AND o.txn_least = $3")


def committed_txn(lc, client, topic: str):
    """A transaction that sent one message to ``topic`` and committed, followed by one plain
    message; once the coordinator has finished it (COMMITTED, 2)."""
    producer = client.create_producer(topic, batching_enabled=False)
    txn = client.new_transaction()
    producer.send(b"t", txn=txn)
    txn.commit()
    producer.send(b"plain")
    producer.close()
    tid = txn.txn_id
    wait_until(lambda: sql(lc, "SELECT status FROM transactions WHERE coordinator_id = $1 AND txn_id = $2",
                           *tid)[0][0] == 2, 10, "the coordinator finished the transaction")
    return tid


def forget(lc, tid) -> None:
    """What the coordinator's purge_ended does once an ended transaction's retention
    (ended_retention_s, a day) has passed: forget it."""
    sql(lc, "DELETE FROM transactions WHERE coordinator_id = $1 AND txn_id = $2 AND status IN (2, 4)", *tid)


def test_a_txn_outcome_row_goes_once_its_transaction_is_forgotten_and_its_marker_trimmed(lc, mclient):
    sub = mclient.subscribe("outcome-gone", "s", initial_position=magnetar.InitialPosition.Earliest)
    tid = committed_txn(lc, mclient, "outcome-gone")
    for msg in receive(sub, 2):
        sub.acknowledge(msg)
    wait_until(lambda: stored(lc, "outcome-gone") == [1], 10, "the commit marker trimmed",
               explain=lambda: stored(lc, "outcome-gone"))
    # The coordinator still knows the transaction (a repeated EndTxnOnPartition must be
    # answered exactly): the row stays, marker or not.
    two_more_passes(lc)
    assert sql(lc, OUTCOMES, full("outcome-gone"), *tid)[0][0] == 1
    forget(lc, tid)
    wait_until(lambda: sql(lc, OUTCOMES, full("outcome-gone"), *tid)[0][0] == 0, 10,
               "the forgotten transaction's outcome row deleted")


def test_a_txn_outcome_row_stays_while_its_commit_marker_is_stored(lc, mclient):
    mclient.subscribe("outcome-kept", "s", initial_position=magnetar.InitialPosition.Earliest)  # acks nothing
    tid = committed_txn(lc, mclient, "outcome-kept")
    forget(lc, tid)
    two_more_passes(lc)
    assert stored(lc, "outcome-kept") == [0, 1]
    assert sql(lc, OUTCOMES, full("outcome-kept"), *tid)[0][0] == 1


# ---------------------------------------------------------------- TTL and expire-messages

def test_message_ttl_expires_unacknowledged_messages_for_every_subscription(lc, mclient):
    create(lc, "ttl")
    ok(lc, "POST", "/admin/v2/persistent/public/default/ttl/messageTTL?messageTTL=1")
    a = mclient.subscribe("ttl", "a", initial_position=magnetar.InitialPosition.Earliest)
    b = mclient.subscribe("ttl", "b", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "ttl", 5)
    marks = ("SELECT array_agg(mark_delete_entry ORDER BY subscription) FROM subscriptions s "
             "JOIN topics t USING (topic_id) WHERE t.topic = $1")
    wait_until(lambda: sql(lc, marks, full("ttl"))[0][0] == [4, 4], 10, "both cursors expired to entry 4")
    wait_until(lambda: stored(lc, "ttl") == [4], 10, "expired entries trimmed")
    ok(lc, "DELETE", "/admin/v2/persistent/public/default/ttl/messageTTL")
    a.close(), b.close()


def test_expire_messages_moves_one_subscription_or_all(lc, mclient):
    keep = mclient.subscribe("expire", "keep", initial_position=magnetar.InitialPosition.Earliest)
    mclient.subscribe("expire", "gone", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "expire", 6)
    base = "/admin/v2/persistent/public/default/expire"
    assert admin(lc, "POST", base + "/subscription/nope/expireMessages/0")[0] == 404
    assert admin(lc, "POST", base + "/subscription/gone/expireMessages/-1")[0] in (400, 422)
    assert admin(lc, "POST", base + "/subscription/gone/expireMessages/3600")[1] == {"expiredEntries": 0}
    assert ok(lc, "POST", base + "/subscription/gone/expireMessages/0") == {"expiredEntries": 6}
    assert [m.data() for m in receive(keep, 6)] == [f"m{i}".encode() for i in range(6)]  # untouched
    assert ok(lc, "POST", base + "/all_subscription/expireMessages/0") == {"expiredEntries": 6}
    with pytest.raises(magnetar.Timeout):
        keep.receive(timeout_millis=300)


# ---------------------------------------------------------------- backlog quotas

def quota(cluster, topic: str, policy: str, limit_size: int = -1, limit_time: int = -1) -> None:
    create(cluster, topic)
    ok(cluster, "POST", f"/admin/v2/persistent/public/default/{topic}/backlogQuota",
       {"limitSize": limit_size, "limitTime": limit_time, "policy": policy})


def test_quota_exception_refuses_sends_with_a_typed_error_until_the_backlog_shrinks(lc, mclient):
    quota(lc, "quota-exc", "producer_exception", limit_size=10)
    sub = mclient.subscribe("quota-exc", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = mclient.create_producer("quota-exc", batching_enabled=False, send_timeout_millis=5000)
    producer.send(b"0123456789abcdef")  # a backlog beyond 10 bytes

    def refused():
        try:
            producer.send(b"x")
        except magnetar.ProducerBlockedQuotaExceeded as exc:
            return exc
        return None
    exc = wait_until(refused, 10, "a send refused by the quota")
    assert "backlog quota" in str(exc)
    for msg in receive(sub, 1 + len(stored(lc, "quota-exc")) - 1):
        sub.acknowledge(msg)
    wait_until(lambda: refused() is None, 10, "sends accepted again once the backlog is consumed")


def test_quota_hold_makes_sends_wait_until_the_backlog_shrinks(lc, mclient):
    quota(lc, "quota-hold", "producer_request_hold", limit_size=10)
    sub = mclient.subscribe("quota-hold", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = mclient.create_producer("quota-hold", batching_enabled=False, send_timeout_millis=20000)
    producer.send(b"0123456789abcdef")
    wait_until(lambda: _blocked(lc, "quota-hold"), 10, "the quota seen as exceeded")
    done = []
    producer.send_async(b"held", lambda res, mid: done.append(res))
    two_more_passes(lc)
    assert done == []  # still held
    sub.acknowledge(sub.receive(timeout_millis=5000))
    wait_until(lambda: done, 15, "the held send completes once the backlog is consumed")
    assert done[0] == magnetar.Result.Ok


def test_quota_exception_refuses_the_very_next_send_once_the_backlog_passes_the_limit(lc, mclient):
    quota(lc, "quota-exc-now", "producer_exception", limit_size=10)
    mclient.subscribe("quota-exc-now", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = mclient.create_producer("quota-exc-now", batching_enabled=False, send_timeout_millis=5000)
    producer.send(b"a")  # within the quota
    two_more_passes(lc)  # the partition knows its quota and its backlog
    producer.send(b"0123456789abcdef")  # this one passes the limit...
    with pytest.raises(magnetar.ProducerBlockedQuotaExceeded, match="backlog quota"):
        producer.send(b"x")  # ...so the next fails at once, not a lifecycle pass later


def test_quota_hold_holds_the_very_next_send_and_an_ack_releases_it(lc, mclient):
    quota(lc, "quota-hold-now", "producer_request_hold", limit_size=10)
    sub = mclient.subscribe("quota-hold-now", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = mclient.create_producer("quota-hold-now", batching_enabled=False, send_timeout_millis=20000)
    producer.send(b"a")
    two_more_passes(lc)
    producer.send(b"0123456789abcdef")
    done = []
    producer.send_async(b"held", lambda res, mid: done.append(res))  # at once: no pass ran since
    two_more_passes(lc)
    assert done == []  # held from the start, and still
    for msg in receive(sub, 2):
        sub.acknowledge(msg)
    wait_until(lambda: done, 15, "the held send completes once the backlog is consumed")
    assert done[0] == magnetar.Result.Ok


def _blocked(cluster, topic: str) -> bool:
    stats = ok(cluster, "GET", f"/admin/v2/persistent/public/default/{topic}/stats")
    return stats.get("backlogQuotaExceeded") is not None


def test_quota_eviction_moves_the_slowest_cursor(lc, mclient):
    quota(lc, "quota-evict", "consumer_backlog_eviction", limit_size=30)
    mclient.subscribe("quota-evict", "slow", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "quota-evict", 10, prefix="0123456789-")  # 12-13 bytes of payload each
    mark = ("SELECT mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id) "
            "WHERE t.topic = $1")
    wait_until(lambda: sql(lc, mark, full("quota-evict"))[0][0] >= 6, 10, "the slow cursor evicted forward",
               explain=lambda: sql(lc, mark, full("quota-evict")))
    assert stored(lc, "quota-evict")[-1] == 9  # the newest entries are kept


# ---------------------------------------------------------------- the REST API

def test_policy_rest_api_validates_and_reads_back(lc):
    ns = "/admin/v2/namespaces/public/default"
    bad = [("/retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}),
           ("/retention", {"retentionTimeInMinutes": 10}),
           ("/retention", "garbage"),
           ("/messageTTL", -5),
           ("/messageTTL", "ten"),
           ("/backlogQuota", {"limitSize": 10, "policy": "drop_it"}),
           ("/backlogQuota", {"limitSize": -7, "policy": "producer_exception"})]
    for path, body in bad:
        status, answer = admin(lc, "POST", ns + path, body)
        assert status == 400, (path, body, status, answer)
        assert answer["reason"]
    assert ok(lc, "GET", ns)["retention_policies"] is None  # nothing changed
    ok(lc, "POST", ns + "/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1024})
    ok(lc, "POST", ns + "/messageTTL", 3600)
    ok(lc, "POST", ns + "/backlogQuota?backlogQuotaType=destination_storage",
       {"limitSize": 1 << 30, "limitTime": -1, "policy": "producer_request_hold"})
    got = ok(lc, "GET", ns)
    assert got["retention_policies"] == {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1024}
    assert got["message_ttl_in_seconds"] == 3600
    assert got["backlog_quota_map"] == {"destination_storage": {
        "limitSize": 1 << 30, "limitTime": -1, "policy": "producer_request_hold"}}
    for path in ("/retention", "/messageTTL", "/backlogQuota"):
        ok(lc, "DELETE", ns + path)
    got = ok(lc, "GET", ns)
    assert got["retention_policies"] is None and got["message_ttl_in_seconds"] is None
    assert got["backlog_quota_map"] == {}
    assert admin(lc, "GET", "/admin/v2/namespaces/public/nope/retention")[0] == 404
    assert admin(lc, "POST", "/admin/v2/persistent/public/default/never-made/retention",
                 {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1})[0] == 404
