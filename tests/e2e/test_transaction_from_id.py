"""``client.transaction_from_id``: other clients (a Spark job's executors) send into a
transaction one client opened, and a third one ends it."""

from __future__ import annotations

import pytest

import magnetar
from tests.e2e.helpers import read_all

# No test here stops a service or changes a cluster-wide setting, and each has its own
# topics: one cluster for the module (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]


def _other_client(cluster, **kwargs) -> magnetar.Client:
    return magnetar.Client(",".join(cluster.broker_urls), **kwargs)


def test_sends_of_attached_clients_commit_together(cluster, client):
    txn = client.new_transaction()
    workers = [_other_client(cluster) for _ in range(2)]
    try:
        for i, worker in enumerate(workers):
            attached = worker.transaction_from_id(txn.txn_id)
            assert attached.txn_id == txn.txn_id
            worker.create_producer("from-id").send(f"w{i}".encode(), txn=attached)
        assert read_all(client, "from-id") == []  # nothing visible while open
        ender = _other_client(cluster)
        ender.transaction_from_id(magnetar.TxnID(*txn.txn_id)).commit()
        ender.close()
    finally:
        for worker in workers:
            worker.close()
    assert sorted(read_all(client, "from-id")) == [b"w0", b"w1"]


def test_an_attached_client_aborts_a_keyed_transaction(cluster, client):
    keyed = _other_client(cluster, transaction_key="spark-sink-a")
    txn = keyed.new_transaction()
    worker = _other_client(cluster)
    try:
        worker.create_producer("from-id-abort").send(b"gone", txn=worker.transaction_from_id(txn.txn_id))
        worker.transaction_from_id(txn.txn_id).abort()
        client.create_producer("from-id-abort").send(b"after")
        assert read_all(client, "from-id-abort") == [b"after"]
        # The transaction is over for every client: a late send is refused.
        with pytest.raises((magnetar.InvalidTxnStatusError, magnetar.TransactionHasOperationFailed,
                            magnetar.ExpiredTransactionError)):
            late = worker.transaction_from_id(txn.txn_id)
            worker.create_producer("from-id-abort").send(b"late", txn=late)
    finally:
        worker.close()
        keyed.close()


def test_a_fenced_keyed_transaction_cannot_be_committed_through_another_client(cluster, client):
    old = _other_client(cluster, transaction_key="spark-sink-b")
    txn = old.new_transaction()
    worker = _other_client(cluster)
    new = _other_client(cluster, transaction_key="spark-sink-b")
    try:
        worker.create_producer("from-id-fenced").send(b"zombie", txn=worker.transaction_from_id(txn.txn_id))
        new.connect_transaction_key()  # fences the old holder, aborting its transaction
        with pytest.raises((magnetar.ExpiredTransactionError, magnetar.InvalidTxnStatusError)):
            worker.transaction_from_id(txn.txn_id).commit()
        assert read_all(client, "from-id-fenced") == []
    finally:
        for c in (old, worker, new):
            c.close()


def test_bad_ids_are_refused_before_any_request(client):
    with pytest.raises(TypeError, match="TxnID"):
        client.transaction_from_id("(0,1)")
    with pytest.raises(ValueError, match="timeout"):
        client.transaction_from_id(magnetar.TxnID(0, 1), timeout_ms=0)
