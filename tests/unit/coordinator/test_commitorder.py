"""Which earlier application commits' partition ends go first (commitorder)."""

from magnetar_coordinator.commitorder import EarlierCommit, earlier_commits


def test_one_entry_per_earlier_commit_oldest_first_with_its_shared_partitions():
    rows = [
        (0, 12, 7, "persistent://t/n/b-partition-1"),
        (1, 3, 5, "persistent://t/n/b-partition-0"),
        (0, 12, 7, "persistent://t/n/a"),
        (1, 3, 5, "persistent://t/n/a"),
    ]
    assert earlier_commits(rows) == [
        EarlierCommit(1, 3, 5, ("persistent://t/n/a", "persistent://t/n/b-partition-0")),
        EarlierCommit(0, 12, 7, ("persistent://t/n/a", "persistent://t/n/b-partition-1")),
    ]


def test_none_earlier():
    assert earlier_commits([]) == []


def test_a_partition_listed_twice_is_ended_once():
    rows = [(0, 1, 1, "persistent://t/n/a"), (0, 1, 1, "persistent://t/n/a")]
    assert earlier_commits(rows) == [EarlierCommit(0, 1, 1, ("persistent://t/n/a",))]
