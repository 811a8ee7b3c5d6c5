"""/admin/v3/transactions and the transaction metrics, against real processes."""

from __future__ import annotations

import json
import urllib.request

import pytest

import magnetar

pytestmark = pytest.mark.e2e
V3 = "/admin/v3/transactions"


def _get(cluster, path: str):
    with urllib.request.urlopen(cluster.admin_url + path, timeout=10) as resp:
        return json.loads(resp.read())


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported by {url}")


def test_transaction_admin_views_and_abort(cluster, client):
    producer = client.create_producer("tx-admin")
    producer.send(b"seed")
    consumer = client.subscribe("tx-admin", "s", initial_position=magnetar.InitialPosition.Earliest)
    msg = consumer.receive(timeout_millis=5000)
    txn = client.new_transaction()
    producer.send(b"in-txn", txn=txn)
    consumer.acknowledge(msg, txn=txn)
    m, l = txn.txn_id
    stats = _get(cluster, f"{V3}/coordinatorStats")
    assert stats["0"]["ongoingTxnSize"] == 1 and stats["0"]["state"] == "Ready"
    meta = _get(cluster, f"{V3}/transactionMetadata/{m}/{l}")
    assert meta["status"] == "OPEN"
    assert list(meta["producedPartitions"]) == ["persistent://public/default/tx-admin"]
    assert meta["ackedPartitions"] == {"persistent://public/default/tx-admin": {"s": {}}}
    assert f"({m},{l})" in _get(cluster, f"{V3}/slowTransactions/1")
    assert _get(cluster, f"{V3}/slowTransactions/600000") == {}
    buffer = _get(cluster, f"{V3}/transactionBufferStats/public/default/tx-admin")
    assert buffer["ongoingTxnSize"] == 1 and buffer["maxReadPosition"] is None
    in_buffer = _get(cluster, f"{V3}/transactionInBufferStats/public/default/tx-admin/{m}/{l}")
    assert in_buffer["state"] == "OPEN" and in_buffer["messages"] == 1
    pending = _get(cluster, f"{V3}/pendingAckStats/public/default/tx-admin/s")
    assert pending["ongoingTxnSize"] == 1
    assert _metric(cluster.url("coordinator-0"), "pulsar_txn_active_count") == 1
    # An operator aborts it: the send is discarded and the ack released.
    req = urllib.request.Request(f"{cluster.admin_url}{V3}/abortTransaction/{m}/{l}", method="POST", data=b"")
    urllib.request.urlopen(req, timeout=10).close()
    assert _get(cluster, f"{V3}/transactionMetadata/{m}/{l}")["status"] == "ABORTED"
    assert _get(cluster, f"{V3}/transactionInBufferStats/public/default/tx-admin/{m}/{l}")["aborted"] is True
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == b"seed" and again.redelivery_count() == 1
    with pytest.raises(magnetar.InvalidTxnStatusError):
        txn.commit()
    owner = cluster.owner_of("persistent://public/default/tx-admin")
    assert _metric(cluster.url(owner), "pulsar_txn_tb_aborted_total") == 1
    assert _metric(cluster.url(owner), "pulsar_txn_tp_aborted_count_total") == 1
    assert _metric(cluster.url("coordinator-0"), "pulsar_txn_aborted_total") == 1


def test_unknown_transaction_is_a_404_with_a_reason(cluster):
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(cluster, f"{V3}/transactionMetadata/0/424242")
    assert err.value.code == 404 and "(0,424242)" in json.loads(err.value.read())["reason"]
