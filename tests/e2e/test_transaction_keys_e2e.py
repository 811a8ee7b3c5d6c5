"""Transaction keys with epoch fencing (seed 000), end to end with real processes:
the seed's zombie-task scenario, one open transaction per key, reconnects, bad keys,
key deletion, and metrics.  Restarts and authentication: test_transaction_keys_restarts.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import read_all
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

N = 10

# Task 1 of the seed: consume N inputs, send their transformation and cumulatively ack
# them in one transaction, then stop (the test freezes it) and, once thawed, try to go on.
TASK_1 = """
import json, sys, magnetar
url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = magnetar.Client(url, transaction_key=key)
consumer = client.subscribe("orders", "job", consumer_type=magnetar.ConsumerType.Failover,
                            initial_position=magnetar.InitialPosition.Earliest)
producer = client.create_producer("orders-out")
txn = client.new_transaction(timeout_ms=60000)
msgs = [consumer.receive(timeout_millis=15000) for _ in range(n)]
for m in msgs:
    producer.send(b"task1:" + m.data(), txn=txn)
consumer.acknowledge_cumulative(msgs[-1], txn=txn)
print("ready", flush=True)
sys.stdin.readline()
results = {}
def attempt(name, fn):
    try:
        fn()
        results[name] = "ok"
    except magnetar.MagnetarError as exc:
        results[name] = type(exc).__name__
attempt("send", lambda: producer.send(b"task1:late", txn=txn))
attempt("ack", lambda: consumer.acknowledge_cumulative(msgs[-1], txn=txn))
attempt("commit", txn.commit)
attempt("new_transaction", client.new_transaction)
print(json.dumps(results), flush=True)
"""


def test_seed_scenario_a_restarted_task_fences_its_frozen_predecessor(cluster, client):
    source = client.create_producer("orders")
    for i in range(N):
        source.send(b"order-%d" % i)
    task1 = subprocess.Popen([sys.executable, "-c", TASK_1, cluster.service_url, "job-K", str(N)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        assert task1.stdout.readline().strip() == "ready"
        task1.send_signal(signal.SIGSTOP)  # task 1 lost: frozen mid-transaction

        started = time.monotonic()
        task2 = magnetar.Client(cluster.service_url, transaction_key="job-K")
        consumer = task2.subscribe("orders", "job", consumer_type=magnetar.ConsumerType.Failover,
                                   initial_position=magnetar.InitialPosition.Earliest)
        producer = task2.create_producer("orders-out")
        txn = task2.new_transaction(timeout_ms=60000)  # fences task 1: its transaction aborted
        msgs = [consumer.receive(timeout_millis=20000) for _ in range(N)]
        for m in msgs:
            producer.send(b"task2:" + m.data(), txn=txn)
        consumer.acknowledge_cumulative(msgs[-1], txn=txn)
        txn.commit()
        took = time.monotonic() - started
        # Visible at once: long before task 1's 60 s transaction timeout.
        assert read_all(client, "orders-out") == [b"task2:order-%d" % i for i in range(N)]
        assert took < 30, f"task 2 took {took:.1f}s"

        task1.send_signal(signal.SIGCONT)
        task1.stdin.write("go\n")
        results = json.loads(task1.stdout.readline())
        assert results == {"send": "ExpiredTransactionError", "ack": "ExpiredTransactionError",
                           "commit": "ExpiredTransactionError", "new_transaction": "NotAllowedError"}
        # Exactly once: task 1 added nothing, the input is consumed.
        assert read_all(client, "orders-out") == [b"task2:order-%d" % i for i in range(N)]
        with pytest.raises(magnetar.Timeout):
            consumer.receive(timeout_millis=500)
        task2.close()
    finally:
        task1.send_signal(signal.SIGCONT)
        task1.kill()
        task1.wait()


def test_one_open_transaction_per_key_and_a_reconnect_keeps_the_epoch(cluster, client):
    keyed = magnetar.Client(cluster.service_url, transaction_key="single")
    assert keyed.connect_transaction_key() == 0
    txn = keyed.new_transaction()
    with pytest.raises(magnetar.NotAllowedError, match="already has an open transaction"):
        keyed.new_transaction()
    # The same client reconnecting (a network blip) presents its epoch and keeps it...
    assert keyed.connect_transaction_key() == 0
    producer = keyed.create_producer("single-out")
    producer.send(b"kept", txn=txn)
    txn.commit()  # ...so its open transaction survives
    assert read_all(client, "single-out") == [b"kept"]
    # Once ended, the next transaction may open.
    keyed.new_transaction().abort()

    # The server holds the rule too: a second NewTxn under the same epoch is refused.
    core = keyed._client.core
    open_txn = keyed.new_transaction()
    url = keyed._client._key and cluster.coordinator_urls[0]
    with pytest.raises(magnetar.NotAllowedError, match="already has an open transaction"):
        keyed._io.run(core.call(url, "/v1/txn/new", pb.NewTxnRequest(
            timeout_ms=10000, transaction_key="single", key_epoch=0), pb.NewTxnResponse))
    open_txn.abort()
    keyed.close()


def test_bad_keys_are_refused_by_the_client_and_by_the_server(cluster):
    for bad, why in [("a&b", "may not contain '&'"), ("", "may not be empty"),
                     ("k" * 256, "at most 255 bytes"), ("tab\there", "control characters")]:
        with pytest.raises(ValueError, match=why):
            magnetar.Client(cluster.service_url, transaction_key=bad)
    plain = magnetar.Client(cluster.service_url)
    core = plain._client.core
    registry = cluster.url("registry")
    for bad in ("a&b", "", "k" * 256):
        with pytest.raises(magnetar.BadRequest):
            plain._io.run(core.call(registry, "/v1/keys/connect",
                                    pb.ConnectKeyRequest(transaction_key=bad, epoch=-1),
                                    pb.ConnectKeyResponse))
    with pytest.raises(magnetar.BadRequest, match="'&'"):
        plain._io.run(core.call(cluster.coordinator_urls[0], "/v1/txn/new", pb.NewTxnRequest(
            timeout_ms=1000, transaction_key="x&y", key_epoch=0), pb.NewTxnResponse))
    # A stale or made-up epoch is not a connect: NotAllowedError.
    with pytest.raises(magnetar.NotAllowedError, match="not current"):
        plain._io.run(core.call(registry, "/v1/keys/connect",
                                pb.ConnectKeyRequest(transaction_key="never", epoch=3),
                                pb.ConnectKeyResponse))
    plain.close()


def _admin(cluster, method: str, path: str) -> tuple[int, dict]:
    req = urllib.request.Request(cluster.admin_url + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_admin_lists_gets_and_deletes_keys_with_any_characters(cluster, client):
    names = ["etl/orders daily", "naïve-ключ", "plain"]
    holders = {n: magnetar.Client(cluster.service_url, transaction_key=n) for n in names}
    open_txns = {}
    for name, holder in holders.items():
        open_txns[name] = holder.new_transaction()
        holder.create_producer("keys-out").send(name.encode(), txn=open_txns[name])

    status, page1 = _admin(cluster, "GET", "/admin/v2/transactions/transaction-keys?pageSize=2")
    assert status == 200 and len(page1["transactionKeys"]) == 2 and page1["nextPageToken"]
    status, page2 = _admin(cluster, "GET", "/admin/v2/transactions/transaction-keys?pageSize=2"
                           f"&pageToken={page1['nextPageToken']}")
    listed = page1["transactionKeys"] + page2["transactionKeys"]
    assert page2["nextPageToken"] is None
    assert sorted(k["transactionKey"] for k in listed) == sorted(names)
    for key in listed:
        assert key["owner"] == "anonymous" and key["epoch"] == 0 and key["coordinatorId"] == 0
        assert key["transactions"] == [str(open_txns[key["transactionKey"]].txn_id)]
        assert key["createdAt"] <= key["lastActiveAt"]

    quoted = urllib.parse.quote(names[0], safe="")
    status, one = _admin(cluster, "GET", f"/admin/v2/transactions/transaction-keys/{quoted}")
    assert status == 200 and one["transactionKey"] == names[0]

    status, deleted = _admin(cluster, "DELETE", f"/admin/v2/transactions/transaction-keys/{quoted}")
    assert status == 200
    assert deleted["abortedTransactions"] == [str(open_txns[names[0]].txn_id)]
    with pytest.raises(magnetar.ExpiredTransactionError):
        open_txns[names[0]].commit()
    status, gone = _admin(cluster, "GET", f"/admin/v2/transactions/transaction-keys/{quoted}")
    assert status == 404 and gone["code"] == "TransactionKeyNotFound"
    status, _ = _admin(cluster, "DELETE", f"/admin/v2/transactions/transaction-keys/{quoted}")
    assert status == 404
    # The epoch survives deletion: a new holder continues from it.
    again = magnetar.Client(cluster.service_url, transaction_key=names[0])
    assert again.connect_transaction_key() == 2  # 0, deletion fenced it (1), this connect
    for name in names[1:]:
        open_txns[name].commit()
    assert sorted(read_all(client, "keys-out")) == sorted(n.encode() for n in names[1:])
    status, bad = _admin(cluster, "GET", "/admin/v2/transactions/transaction-keys/a%26b")
    assert status == 400 and "'&'" in bad["reason"]
    for holder in [*holders.values(), again]:
        holder.close()


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return resp.read().decode()


@pytest.mark.cluster(service_env={"registry": {"MAGNETAR_METRICS_INTERVAL_MS": "200",
                                               "MAGNETAR_METRICS_MAX_LABELLED_KEYS": "2"}})
def test_registry_metrics_count_keys_and_cap_the_labelled_ones(cluster):
    holders = [magnetar.Client(cluster.service_url, transaction_key=f"m{i}") for i in range(3)]
    for h in holders:
        h.connect_transaction_key()
    holders[0].close()
    fencer = magnetar.Client(cluster.service_url, transaction_key="m0")
    txn_holder = magnetar.Client(cluster.service_url, transaction_key="m2")
    txn_holder.new_transaction()
    fencer.connect_transaction_key()  # epoch 1 for m0
    magnetar.Client(cluster.service_url, transaction_key="m2").connect_transaction_key()  # fences a txn
    registry = cluster.url("registry")
    m2 = 'pulsar_txn_transaction_key_epoch{transaction_key="anonymous&m2"} 2.0'
    text = wait_until(lambda: (t := _metrics(registry)) and m2 in t and t, 20.0,
                      "the registry's metrics showing the second key")
    assert "pulsar_txn_transaction_key_count 3.0" in text
    epochs = [line for line in text.splitlines() if line.startswith("pulsar_txn_transaction_key_epoch{")]
    assert len(epochs) == 2, epochs  # capped at 2 labelled keys: the most recently active
    assert 'pulsar_txn_transaction_key_epoch{transaction_key="anonymous&m0"} 1.0' in text
    assert "pulsar_txn_transaction_key_age_count" in text
    assert 'magnetar_txn_key_connects_total{outcome="new"} 6.0' in text
    assert "magnetar_txn_key_fenced_transactions_total 1.0" in text
