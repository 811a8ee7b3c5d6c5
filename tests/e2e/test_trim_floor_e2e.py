"""Issue #30: nothing younger than the minimum age (MAGNETAR_TRIM_MIN_AGE_S, 10 minutes by
default, Pulsar's minimum ledger rollover) is trimmed, whatever the cursors say.  With
the shipped defaults (retention 0, the default minimum age) a subscriber or reader that
arrives after the lifecycle has run over the data still gets everything written, on a
topic with no subscription and on one whose only subscription acknowledged it all.

One cluster for the module (the shipped retention, a short lifecycle interval); each
test uses its own topic.  "The lifecycle ran" is two further complete passes
(magnetar_broker_lifecycle_passes_total), never a sleep.
"""

from __future__ import annotations

import pulsar
import pytest

import magnetar
from tests.e2e.helpers import SHIPPED_RETENTION, two_more_passes
from tests.e2e.test_storage_lifecycle_e2e import create, full, ok, produce, receive, sql, stored
from tests.waiting import wait_until

SHIPPED = {
    # The broker's own defaults (TEST_ENV keeps everything): retention 0 and, by leaving
    # MAGNETAR_TRIM_MIN_AGE_S unset, the default minimum age.
    **SHIPPED_RETENTION,
    "MAGNETAR_LIFECYCLE_INTERVAL_MS": "150",
    "MAGNETAR_STORAGE_POLICY_CACHE_MS": "0",
}
N = 200
pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster, pytest.mark.cluster(brokers=1, env=SHIPPED)]


@pytest.fixture(scope="module")
def mclient(module_cluster):
    c = magnetar.Client(",".join(module_cluster.broker_urls))
    yield c
    c.close()


def sent(prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(N)]


def test_a_late_subscriber_from_earliest_gets_everything_written(cluster, mclient):
    produce(mclient, "floor-late-sub", N)
    two_more_passes(cluster)  # with no subscription, retention 0 alone would trim 0..198
    assert stored(cluster, "floor-late-sub") == list(range(N))
    sub = mclient.subscribe("floor-late-sub", "late", initial_position=magnetar.InitialPosition.Earliest)
    assert [m.data() for m in receive(sub, N)] == sent()


def test_a_reader_from_earliest_gets_everything_written_on_both_protocols(cluster, mclient):
    produce(mclient, "floor-reader", N)
    two_more_passes(cluster)
    reader = mclient.create_reader("floor-reader", magnetar.MessageId.earliest)
    assert [reader.read_next(timeout_millis=5000).data() for _ in range(N)] == sent()
    reader.close()
    client = pulsar.Client(cluster.pulsar_service_url)
    try:
        preader = client.create_reader("persistent://public/default/floor-reader", pulsar.MessageId.earliest)
        assert [preader.read_next(timeout_millis=5000).data() for _ in range(N)] == sent()
    finally:
        client.close()


def test_the_floor_holds_on_a_topic_whose_subscriptions_acknowledged_everything(cluster, mclient):
    # Pulsar never deletes its current ledger, subscriptions or not: neither do we.
    first = mclient.subscribe("floor-acked", "first", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "floor-acked", N)
    first.acknowledge_cumulative(receive(first, N)[-1])
    mark = ("SELECT mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id) "
            "WHERE t.topic = $1 AND s.subscription = 'first'")
    wait_until(lambda: sql(cluster, mark, full("floor-acked"))[0][0] == N - 1, 10, "the acknowledgement stored")
    two_more_passes(cluster)  # retention 0 alone would trim 0..198 now
    assert stored(cluster, "floor-acked") == list(range(N))
    second = mclient.subscribe("floor-acked", "second", initial_position=magnetar.InitialPosition.Earliest)
    assert [m.data() for m in receive(second, N)] == sent()


def test_message_ttl_moves_cursors_at_once_and_the_floor_keeps_only_the_storage(cluster, mclient):
    # As in Pulsar, expiry acknowledges on the subscriptions' behalf (deletes nothing
    # itself): it is not held back by the floor; the storage is.
    create(cluster, "floor-ttl")
    ok(cluster, "POST", "/admin/v2/persistent/public/default/floor-ttl/messageTTL?messageTTL=1")
    mclient.subscribe("floor-ttl", "a", initial_position=magnetar.InitialPosition.Earliest)
    produce(mclient, "floor-ttl", 10)
    mark = ("SELECT mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id) "
            "WHERE t.topic = $1 AND s.subscription = 'a'")
    wait_until(lambda: sql(cluster, mark, full("floor-ttl"))[0][0] == 9, 10, "the cursor expired to entry 9")
    two_more_passes(cluster)
    assert stored(cluster, "floor-ttl") == list(range(10))
