"""The partition's write planner, rule by rule (pure: no database)."""

from magnetar_broker.partition.planner import (
    Append,
    TxnAppend,
    TxnEnd,
    plan_group,
    plan_plain,
    settle_group,
)
from magnetar_broker.partition.txnrules import TxnBuf
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import AuthorizationError, InvalidTxnStatusError, TransactionNotFound
from magnetar_protocol.txnid import TxnID

T1, T2, T3 = TxnID(0, 1), TxnID(0, 2), TxnID(0, 3)
ANYONE = ("anonymous", True)
ALICE, BOB = ("alice", False), ("bob", False)
NOW = 1000


def plain(name: str, seq: int, payload: bytes = b"x", n: int = 1) -> Append:
    return Append(None, name, seq, seq + n - 1, n, payload)


def send(txn: TxnID, name: str, seq: int, payload: bytes = b"t", actor=ANYONE) -> TxnAppend:
    return TxnAppend(None, name, seq, seq, 1, payload, txn, actor)


def registered(**kw) -> TxnBuf:
    return TxnBuf(registered=True, **kw)


def plan(items, txns=None, next_id=10, dedup=True):
    return plan_group(items, txns if txns is not None else {}, next_id, dedup, NOW, "t")


# ---------------------------------------------------------------- ordering


def test_plain_entries_take_ids_in_queue_order_from_the_log_head():
    p = plan_plain([plain("a", 0), plain("b", 0), plain("a", 1)], 7, True, NOW)
    assert p.columns[0] == [7, 8, 9] and p.next_entry_id == 10
    assert [(e.entry_id, e.producer_name) for e in p.entries()] == [(7, "a"), (8, "b"), (9, "a")]


def test_mixed_group_keeps_queue_order_and_numbers_txn_batches_in_send_order():
    txns = {T1: registered(batches=2, messages=2, payloads=None)}
    p = plan([plain("a", 0), send(T1, "p", 0, b"u"), plain("a", 1), send(T1, "p", 1, b"v")], txns)
    assert p.results == [10, 2, 11, 3]
    assert [r[0] for r in p.rows.entries] == [10, 11]
    assert [r[2] for r in p.rows.txn_entries] == [2, 3]
    assert p.next_entry_id == 12


# ---------------------------------------------------------------- dedup inside a group


def test_one_sequence_per_producer_at_its_highest():
    p = plan_plain([plain("a", 0), plain("a", 1, n=3), plain("b", 5)], 0, True, NOW)
    assert p.sequences == {"a": 3, "b": 5}
    assert plan_plain([plain("a", 0)], 0, False, NOW).sequences == {}


def test_mixed_group_one_sequence_row_per_producer_and_registering_txn():
    txns = {T1: registered()}
    p = plan([plain("a", 0), plain("a", 4), send(T1, "a", 5), send(T1, "a", 6), send(T2, "a", 7)], txns)
    assert sorted(p.rows.sequences, key=str) == sorted(
        [("a", 6, None, None), ("a", 7, 0, 2)], key=str)
    assert plan([plain("a", 0)], dedup=False).rows.sequences == []


def test_a_refused_registration_keeps_its_sequence_out_of_memory():
    p = plan([plain("a", 0), send(T2, "a", 9)])
    done = settle_group(p, {}, [(False, 0, 0, None, False, None)], "t")
    assert done.sequences == {"a": 0}
    assert isinstance(done.results[1], TransactionNotFound)
    assert T2 not in done.txns


# ---------------------------------------------------------------- sidecar rows vs marker rows


def test_transactional_sends_are_sidecar_rows_never_entries():
    p = plan([send(T1, "p", 0)], {T1: registered()})
    assert p.rows.entries == [] and len(p.rows.txn_entries) == 1
    assert p.rows.txn_entries[0][:3] == (0, 1, 0)


def test_a_commit_writes_one_marker_without_payload_an_abort_none():
    txns = {T1: registered(batches=1, messages=3, payloads=[b"m"]), T2: registered(batches=1, messages=1)}
    p = plan([TxnEnd(T1, True), TxnEnd(T2, False)], txns)
    assert p.rows.entries == [(10, "", 0, 0, 3, NOW, b"", 0, 1)]
    assert p.rows.outcomes == [(0, 1, True), (0, 2, False)]
    assert p.rows.discards == [T2]
    done = settle_group(p, txns, [], "t")
    marker = done.cached[0]
    assert marker.txn == T1 and marker.payload is None and marker.parts == (b"m",)
    assert done.ended == [True, False] and done.txns[T1].payloads is None


def test_a_marker_takes_its_place_in_the_queue_order():
    txns = {T1: registered(batches=1, messages=2, payloads=None)}
    p = plan([plain("a", 0), TxnEnd(T1, True), plain("a", 1)], txns)
    assert p.results == [10, None, 12]
    assert [(r[0], r[-1]) for r in p.rows.entries] == [(10, None), (11, 1), (12, None)]
    assert p.next_entry_id == 13


def test_an_empty_transaction_commits_without_a_marker():
    p = plan([TxnEnd(T1, True)], {T1: registered()})
    assert p.rows.entries == [] and p.rows.outcomes == [(0, 1, True)] and p.next_entry_id == 10


def test_appends_of_a_transaction_aborted_in_the_same_group_are_not_written():
    txns = {T1: registered(), T2: registered()}
    p = plan([send(T1, "p", 0), send(T2, "p", 1), TxnEnd(T1, False), TxnEnd(T2, True)], txns)
    assert [r[:2] for r in p.rows.txn_entries] == [(0, 2)]
    assert p.results == [0, 0, None, None]
    assert [r[-2:] for r in p.rows.entries] == [(0, 2)]  # T2's marker only


def test_an_ended_transaction_refuses_sends_and_the_opposite_end():
    txns = {T1: registered(committed=True)}
    p = plan([send(T1, "p", 0), TxnEnd(T1, False), TxnEnd(T1, True)], txns)
    assert isinstance(p.results[0], InvalidTxnStatusError)
    assert isinstance(p.results[1], InvalidTxnStatusError) and p.results[2] is None
    assert p.rows.txn_entries == [] and p.rows.outcomes == []


# ---------------------------------------------------------------- registration and owners


def test_first_sends_register_in_the_write_and_are_numbered_after_earlier_batches():
    p = plan([send(T3, "p", 0, b"a", ALICE), send(T3, "p", 1, b"b", ALICE)])
    assert p.rows.registrations == [(0, 3, "alice", False)]
    done = settle_group(p, {}, [(True, 4, 9, pb.TXN_OPEN, False, "alice")], "t")
    assert done.results == [4, 5] and done.opened == 1
    buf = done.txns[T3]
    assert (buf.batches, buf.messages, buf.registered, buf.owner) == (6, 11, True, "alice")
    assert buf.payloads is None  # batches buffered earlier are not in memory


def test_an_end_in_the_same_group_refuses_the_first_sends_before_it():
    p = plan([send(T1, "p", 0), TxnEnd(T1, False)], {T1: TxnBuf()})
    assert isinstance(p.results[0], InvalidTxnStatusError) and p.results[1] is None
    assert p.rows.registrations == [] and p.rows.txn_entries == [] and p.rows.sequences == []


def test_another_roles_send_is_refused_registered_or_first():
    p = plan([send(T1, "p", 0, actor=BOB)], {T1: registered(owner="alice")})
    assert isinstance(p.results[0], AuthorizationError) and p.rows.txn_entries == []
    p = plan([send(T3, "p", 0, actor=ALICE), send(T3, "p", 1, actor=BOB)])
    assert p.results[0] == 0 and isinstance(p.results[1], AuthorizationError)
    assert len(p.rows.txn_entries) == 1


# ---------------------------------------------------------------- the lease epoch


def test_planning_changes_nothing_until_the_write_succeeded():
    """Memory changes only through settle_group, after the lease-checked statement
    succeeded: a fenced (lease epoch moved) or failed write leaves the buffers as they
    were."""
    txns = {T1: registered(batches=1, messages=1, payloads=[b"a"])}
    before = {t: b.copy() for t, b in txns.items()}
    plan([send(T1, "p", 1, b"b"), TxnEnd(T1, True), send(T2, "p", 2)], txns)
    assert txns == before
