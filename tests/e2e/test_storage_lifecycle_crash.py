"""Issue #16: a broker SIGKILLed between two trim batches (failpoint
broker.trim.after_delete) loses nothing it should keep, and the broker that serves the
partition next resumes trimming where it stopped."""

from __future__ import annotations

import pytest

import magnetar
from tests.e2e.test_storage_lifecycle_e2e import LIFECYCLE_ENV, full, produce, receive, sql, stored
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.cluster(brokers=1, env=LIFECYCLE_ENV,
                     service_env={"broker": {"MAGNETAR_FAILPOINTS": "broker.trim.after_delete"}})
def test_sigkill_between_trim_batches_keeps_the_backlog_and_the_next_owner_resumes(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    sub = client.subscribe("crash-trim", "s", initial_position=magnetar.InitialPosition.Earliest)
    produce(client, "crash-trim", 30)
    got = receive(sub, 30)
    sub.acknowledge_cumulative(got[19])  # one cursor write: 0..19 acknowledged, 20..29 not
    wait_until(lambda: not cluster.services["broker-0"].alive, 15, "the broker killed by its failpoint")
    client.close()
    # One batch (4 entries, MAGNETAR_TRIM_BATCH_ENTRIES) went; the rest of the log is whole.
    assert stored(cluster, "crash-trim") == list(range(4, 30))
    mark = sql(cluster, "SELECT mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id) "
                        "WHERE t.topic = $1", full("crash-trim"))[0][0]
    assert mark == 19

    cluster.start("broker-0", extra_env={"MAGNETAR_FAILPOINTS": ""})
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        again = client.subscribe("crash-trim", "s")
        assert [m.data() for m in receive(again, 10)] == [f"m{i}".encode() for i in range(20, 30)]
        wait_until(lambda: stored(cluster, "crash-trim") == list(range(20, 30)), 15,
                   "the restarted owner trims the rest", explain=lambda: stored(cluster, "crash-trim"))
    finally:
        client.close()
