import pytest

from magnetar_protocol.errors import InvalidTopicName
from magnetar_protocol.topics import TopicName


@pytest.mark.parametrize("given,full", [
    ("orders", "persistent://public/default/orders"),
    ("acme/prod/orders", "persistent://acme/prod/orders"),
    ("persistent://acme/prod/orders", "persistent://acme/prod/orders"),
    ("a_b=c:d.e-f", "persistent://public/default/a_b=c:d.e-f"),
])
def test_parse_forms(given, full):
    assert TopicName.parse(given).full == full


@pytest.mark.parametrize("bad", [
    "", "a/b", "a/b/c/d", "non-persistent://a/b/c", "bad name", "x/y/a..b", "héllo",
    "persistent://public/default/" + "x" * 250, "t/ns/a*b",
])
def test_invalid_names_are_refused(bad):
    with pytest.raises(InvalidTopicName):
        TopicName.parse(bad)


def test_partitions():
    name = TopicName.parse("acme/prod/orders")
    part = name.partition(3)
    assert part.full == "persistent://acme/prod/orders-partition-3"
    assert part.partition_index == 3
    assert part.base == name
    assert name.partition_index == -1
    assert TopicName.parse("x-partition-01").partition_index == -1  # not a canonical index


@pytest.mark.parametrize("local", ["t-partition--1", "t-partition-1", "x-partition-", "-", ".", "-=:"])
def test_names_that_are_never_created(local):
    # One rule for the admin's create and the broker's auto-creation.
    assert TopicName.parse(f"t/ns/{local}").creation_problem()


@pytest.mark.parametrize("local", ["orders", "a-1", "partition-x", "x_partition_1"])
def test_names_that_may_be_created(local):
    assert TopicName.parse(f"t/ns/{local}").creation_problem() is None
