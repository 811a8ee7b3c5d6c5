import pytest

from magnetar_coordinator import statemachine as sm
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import InvalidTxnStatusError

COMMIT, ABORT = pb.TXN_COMMIT, pb.TXN_ABORT


def test_legal_transitions_only():
    assert sm.can_transition(sm.OPEN, sm.COMMITTING)
    assert sm.can_transition(sm.OPEN, sm.ABORTING)
    assert sm.can_transition(sm.COMMITTING, sm.COMMITTED)
    assert sm.can_transition(sm.ABORTING, sm.ABORTED)
    for bad in [(sm.OPEN, sm.COMMITTED), (sm.COMMITTING, sm.ABORTING), (sm.COMMITTED, sm.OPEN),
                (sm.ABORTED, sm.COMMITTING), (sm.ABORTING, sm.COMMITTED)]:
        assert not sm.can_transition(*bad)


@pytest.mark.parametrize("status,action,step", [
    (sm.OPEN, COMMIT, sm.Step.START), (sm.OPEN, ABORT, sm.Step.START),
    (sm.COMMITTING, COMMIT, sm.Step.RESUME), (sm.ABORTING, ABORT, sm.Step.RESUME),
    (sm.COMMITTED, COMMIT, sm.Step.DONE), (sm.ABORTED, ABORT, sm.Step.DONE),
])
def test_repeating_an_end_is_idempotent(status, action, step):
    assert sm.plan_end(status, action) is step


@pytest.mark.parametrize("status,action", [
    (sm.COMMITTING, ABORT), (sm.COMMITTED, ABORT), (sm.ABORTING, COMMIT), (sm.ABORTED, COMMIT)])
def test_opposite_action_is_refused(status, action):
    with pytest.raises(InvalidTxnStatusError):
        sm.plan_end(status, action)


def test_registration_needs_open():
    sm.require_open(sm.OPEN, "x")
    with pytest.raises(InvalidTxnStatusError):
        sm.require_open(sm.COMMITTING, "add partitions")


def test_txn_string_form():
    assert sm.txn_str(3, 42) == "(3,42)"


def test_a_fenced_transaction_answers_expired_not_invalid_status():
    from magnetar_protocol.errors import ExpiredTransactionError
    for status in (sm.ABORTING, sm.ABORTED):
        with pytest.raises(ExpiredTransactionError):
            sm.plan_end(status, pb.TXN_COMMIT, expired=True)
    assert sm.plan_end(sm.ABORTED, pb.TXN_ABORT, expired=True) is sm.Step.DONE
    with pytest.raises(ExpiredTransactionError):
        sm.require_open(sm.ABORTED, "add partitions", expired=True)
