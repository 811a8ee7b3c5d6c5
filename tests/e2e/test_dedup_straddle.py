"""A producer's retry that straddles what the broker stored (its first messages are
duplicates, the rest new) stores only the new ones, with and without a transaction:
the retried task of a Spark write resends its whole partition this way."""

from __future__ import annotations

import pytest

import magnetar
from tests.e2e.helpers import read_all

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("in_txn", [False, True], ids=["plain", "transaction"])
def test_a_retry_straddling_the_stored_messages_stores_only_the_new_ones(cluster, client, in_txn):
    txn = client.new_transaction() if in_txn else None
    first = client.create_producer("straddle", producer_name="task-0")
    for i in range(3):
        first.send_async(f"r{i}".encode(), lambda *_: None, sequence_id=i, txn=txn)
    first.flush()
    first.close()  # the attempt dies; its retry sends everything again under the same name
    retry = client.create_producer("straddle", producer_name="task-0", send_timeout_millis=10000)
    results = []
    for i in range(5):  # one batch: sequence ids 0..4, of which 0..2 are stored
        retry.send_async(f"r{i}".encode(), lambda result, _id: results.append(result),
                         sequence_id=i, txn=txn)
    retry.flush()
    assert results == [magnetar.Result.Ok] * 5
    if txn is not None:
        txn.commit()
    assert read_all(client, "straddle") == [f"r{i}".encode() for i in range(5)]
