import pytest

from magnetar_registry.binding import choose_coordinator, connect_outcome


def test_binding_is_a_stable_hash_over_the_live_ids():
    ids = [0, 1, 2]
    chosen = {k: choose_coordinator(f"o&{k}", ids) for k in range(300)}
    assert chosen == {k: choose_coordinator(f"o&{k}", [2, 0, 1]) for k in range(300)}
    assert set(chosen.values()) == {0, 1, 2}  # spread over every coordinator
    with pytest.raises(ValueError, match="no live coordinator"):
        choose_coordinator("o&k", [])


def test_connect_outcomes_follow_the_seed():
    assert connect_outcome(None, False, -1) == "new"  # first connection brings -1
    assert connect_outcome(4, False, -1) == "new"  # a new connection always takes over
    assert connect_outcome(4, False, 4) == "resume"  # the same client reconnecting
    assert connect_outcome(4, False, 3) == "refuse"  # fenced
    assert connect_outcome(4, False, 5) == "refuse"  # made up
    assert connect_outcome(4, True, 4) == "refuse"  # deleted
    assert connect_outcome(None, False, 0) == "refuse"
