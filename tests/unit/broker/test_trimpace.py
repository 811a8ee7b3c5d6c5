"""Trimming's pace (partition/trimpace.py): batches bounded in entries and bytes, pauses
that keep trimming to its duty, and a budget per pass."""

from magnetar_broker.partition.trimpace import TrimBudget, TrimPace, batch_cut, pause_after

PACE = TrimPace(batch_entries=4, batch_bytes=1000, duty=0.25, min_pause_s=0.002, max_pause_s=1.0,
                partition_batches=3, pass_batches=5)


def test_a_batch_is_bounded_in_entries():
    assert batch_cut([10] * 10, PACE) == 4
    assert batch_cut([10] * 2, PACE) == 2
    assert batch_cut([], PACE) == 0


def test_a_batch_is_bounded_in_bytes():
    assert batch_cut([400, 400, 400, 400], PACE) == 2
    assert batch_cut([400, 600, 1], PACE) == 2  # exactly at the limit fits
    assert batch_cut([400, 601], PACE) == 1


def test_an_entry_larger_than_a_batch_goes_alone():
    assert batch_cut([5000, 10], PACE) == 1
    assert batch_cut([10, 5000], PACE) == 1


def test_the_pause_keeps_trimming_to_its_duty():
    # 25%: a batch of 10 ms is followed by 30 ms for sends.
    assert abs(pause_after(0.010, PACE) - 0.030) < 1e-9
    half = TrimPace(**{**PACE.__dict__, "duty": 0.5})
    assert abs(pause_after(0.010, half) - 0.010) < 1e-9
    full = TrimPace(**{**PACE.__dict__, "duty": 1.0, "min_pause_s": 0.0})
    assert pause_after(0.010, full) == 0.0


def test_the_pause_is_clamped():
    assert pause_after(0.0, PACE) == 0.002  # even a trivial batch yields
    assert pause_after(-1.0, PACE) == 0.002  # a clock step backwards is no batch time
    assert pause_after(10.0, PACE) == 1.0  # a batch slowed by load does not stall trimming


def test_the_budget_bounds_each_partition_and_the_pass():
    budget = TrimBudget(PACE)
    assert budget.partition() == 3
    for _ in range(3):
        budget.spend()
    assert budget.partition() == 2  # the pass has 2 left of 5
    budget.spend()
    budget.spend()
    assert budget.partition() == 0
    budget.spend()  # never negative
    assert budget.partition() == 0
