"""PIP-68 access rules (Pulsar's ExclusiveProducerTest scenarios, at the rule level)."""

import pytest

from magnetar_broker.partition.access import (
    EXCLUSIVE,
    EXCLUSIVE_WITH_FENCING,
    SHARED,
    WAIT_FOR_EXCLUSIVE,
    AccessState,
    Outcome,
)
from magnetar_protocol.errors import ProducerBusy, ProducerFenced


def _attach(state, pid, mode, name, requested=None):
    d = state.admit(mode, name, requested)
    assert d.outcome is Outcome.ADMIT
    for f in d.fence:
        state.detach(f)
    state.attach(pid, mode, name, d.epoch)
    return d


def test_first_exclusive_gets_epoch_1_and_second_is_fenced():
    s = AccessState()
    assert _attach(s, 1, EXCLUSIVE, "a").epoch == 1
    with pytest.raises(ProducerFenced):
        s.admit(EXCLUSIVE, "b", None)


def test_shared_while_exclusive_is_busy():
    s = AccessState()
    _attach(s, 1, EXCLUSIVE, "a")
    with pytest.raises(ProducerBusy):
        s.admit(SHARED, "b", None)


def test_exclusive_over_shared_is_fenced():
    s = AccessState()
    _attach(s, 1, SHARED, "a")
    with pytest.raises(ProducerFenced):
        s.admit(EXCLUSIVE, "b", None)


def test_reconnect_keeps_epoch_and_stale_epoch_is_fenced():
    s = AccessState()
    _attach(s, 1, EXCLUSIVE, "a")
    s.detach(1)  # session lost
    assert _attach(s, 2, EXCLUSIVE, "a", requested=1).epoch == 1
    s.detach(2)
    assert _attach(s, 3, EXCLUSIVE, "b").epoch == 2  # a new producer takes over
    s.detach(3)
    with pytest.raises(ProducerFenced):
        s.admit(EXCLUSIVE, "a", 1)


def test_waiters_are_served_first_come_first_served():
    s = AccessState()
    _attach(s, 1, EXCLUSIVE, "holder")
    for name in ("w1", "w2"):
        assert s.admit(WAIT_FOR_EXCLUSIVE, name, None).outcome is Outcome.WAIT
        s.enqueue(name)
    s.detach(1)
    assert s.admit(WAIT_FOR_EXCLUSIVE, "w2", None).outcome is Outcome.WAIT  # not its turn
    with pytest.raises(ProducerFenced):
        s.admit(EXCLUSIVE, "late", None)  # nor a newcomer's
    assert _attach(s, 2, WAIT_FOR_EXCLUSIVE, "w1").epoch == 2
    assert list(s.waiters) == ["w2"]


def test_fencing_takes_over_from_everyone():
    s = AccessState()
    _attach(s, 1, EXCLUSIVE, "holder")
    s.enqueue("w1")
    d = s.admit(EXCLUSIVE_WITH_FENCING, "boss", None)
    assert d.outcome is Outcome.ADMIT and d.fence == (1,) and d.fence_waiters and d.epoch == 2


def test_fencing_over_shared_producers():
    s = AccessState()
    _attach(s, 1, SHARED, "a")
    _attach(s, 2, SHARED, "b")
    d = s.admit(EXCLUSIVE_WITH_FENCING, "boss", None)
    assert set(d.fence) == {1, 2} and d.epoch == 1
