"""The pure rule of who adopts a gone coordinator's TCID (coordinator/adoption.py)."""

from collections import Counter

from magnetar_coordinator.adoption import FALLBACK_TTLS, choose_adopter, should_adopt


def test_no_live_coordinator_no_adopter_and_never_itself():
    assert choose_adopter(3, []) is None
    assert choose_adopter(3, [3]) is None
    assert choose_adopter(3, [3, 1]) == 1


def test_every_candidate_computes_the_same_choice_whatever_the_order():
    for orphan in range(50):
        assert choose_adopter(orphan, [0, 1, 2, 7]) == choose_adopter(orphan, [7, 2, 1, 0])


def test_the_gone_tcids_of_a_scale_down_spread_over_the_survivors():
    adopters = Counter(choose_adopter(orphan, [0, 1, 2]) for orphan in range(3, 303))
    assert set(adopters) == {0, 1, 2} and min(adopters.values()) > 60


def test_a_coordinator_leaving_moves_only_the_tcids_it_had_adopted():
    before = {o: choose_adopter(o, [0, 1, 2, 3]) for o in range(10, 210)}
    after = {o: choose_adopter(o, [0, 1, 3]) for o in range(10, 210)}
    assert all(after[o] == before[o] for o in before if before[o] != 2)


def test_only_the_chosen_one_tries_until_the_fallback_then_anyone():
    ttl = 2.0
    chosen = choose_adopter(5, [0, 1])
    other = 1 - chosen
    assert should_adopt(chosen, 5, ttl + 0.1, ttl, [0, 1])
    assert not should_adopt(other, 5, ttl + 0.1, ttl, [0, 1])
    assert should_adopt(other, 5, FALLBACK_TTLS * ttl + 0.1, ttl, [0, 1])
    assert not should_adopt(chosen, 5, ttl, ttl, [0, 1])  # not stale yet
    assert not should_adopt(5, 5, 100, ttl, [0, 1, 5])  # a process never adopts itself
