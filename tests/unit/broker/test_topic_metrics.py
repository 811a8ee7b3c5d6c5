"""topic_metrics.py: Pulsar-named topic gauges per namespace, or per topic up to a bound."""

from magnetar_broker.topic_metrics import OTHER, SUBSCRIPTION_GAUGE, PartitionSample, export


def sample(ns, topic, backlog, storage, subs=None):
    return PartitionSample(ns, topic, {"pulsar_msg_backlog": backlog, "pulsar_storage_size": storage,
                                       "pulsar_rate_in": 1.0}, subs or {"s": backlog})


SAMPLES = [
    sample("t/a", "persistent://t/a/x", 10, 1000),
    sample("t/a", "persistent://t/a/x", 5, 500),   # another partition of x
    sample("t/a", "persistent://t/a/y", 1, 100),
    sample("t/b", "persistent://t/b/z", 7, 700),
]


def rows(exported, name):
    return {tuple(sorted(labels.items())): value for labels, value in exported.rows[name]}


def test_namespace_level_by_default():
    e = export(SAMPLES, "c1", per_topic=False, max_topics=10)
    assert rows(e, "pulsar_msg_backlog") == {
        (("cluster", "c1"), ("namespace", "t/a")): 16, (("cluster", "c1"), ("namespace", "t/b")): 7}
    assert rows(e, "pulsar_rate_in")[(("cluster", "c1"), ("namespace", "t/a"))] == 3.0
    assert e.rows[SUBSCRIPTION_GAUGE[0]] == [] and e.folded == 0


def test_per_topic_partitions_summed_into_their_topic():
    e = export(SAMPLES, "c1", per_topic=True, max_topics=10)
    backlog = rows(e, "pulsar_msg_backlog")
    assert backlog[(("cluster", "c1"), ("namespace", "t/a"), ("topic", "persistent://t/a/x"))] == 15
    assert len(backlog) == 3
    subs = rows(e, SUBSCRIPTION_GAUGE[0])
    assert subs[(("cluster", "c1"), ("namespace", "t/a"), ("subscription", "s"),
                 ("topic", "persistent://t/a/x"))] == 15


def test_past_the_bound_the_smallest_backlogs_fold_into_other_per_namespace():
    e = export(SAMPLES, "c1", per_topic=True, max_topics=1)
    backlog = rows(e, "pulsar_msg_backlog")
    assert backlog == {
        (("cluster", "c1"), ("namespace", "t/a"), ("topic", "persistent://t/a/x")): 15,
        (("cluster", "c1"), ("namespace", "t/a"), ("topic", OTHER)): 1,
        (("cluster", "c1"), ("namespace", "t/b"), ("topic", OTHER)): 7,
    }
    assert e.folded == 2
    assert sum(backlog.values()) == 23  # totals stay exact
    # Folded topics keep no subscription series (that would defeat the bound).
    assert {labels["topic"] for labels, _ in e.rows[SUBSCRIPTION_GAUGE[0]]} == {"persistent://t/a/x"}


def test_bound_zero_folds_everything():
    e = export(SAMPLES, "c1", per_topic=True, max_topics=0)
    assert e.folded == 3 and {labels["topic"] for labels, _ in e.rows["pulsar_storage_size"]} == {OTHER}
