"""``magnetar-admin transactions ...`` against a real Magnetar (broker, coordinator,
registry and admin service processes, one cluster for the module): the command runs in
this process through ``run()`` (what a kubectl plugin calls), and through the console
script where the exit code is the point."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import magnetar
from magnetar.admin_cli import run
from magnetar_runtime.local.cluster import command_path

LIVE_CLUSTER = {"brokers": 1, "coordinators": 1, "registry": True, "admin": True}


@pytest.fixture
def admin_cli(live, capsys):
    """``admin_cli(*args)`` -> (exit code, stdout, stderr) of ``run()`` on the live cluster."""
    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = run(["--admin-url", live.admin_url, *args])
        out, err = capsys.readouterr()
        return code, out, err
    return call


def ok(admin_cli, *args: str) -> str:
    code, out, err = admin_cli(*args)
    assert code == 0, f"magnetar-admin {' '.join(args)} -> {code}\n{out}\n{err}"
    return out


def js(admin_cli, *args: str):
    return json.loads(ok(admin_cli, "--output", "json", *args))


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


@pytest.fixture
def client(live):
    c = magnetar.Client(live.service_url)
    yield c
    c.close()


def test_transaction_views_and_abort(live, client, admin_cli):
    topic = "persistent://public/default/cli-txn"
    producer = client.create_producer(topic)
    producer.send(b"seed")
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    msg = consumer.receive(timeout_millis=10000)
    txn = client.new_transaction()
    producer.send(b"in-txn", txn=txn)
    consumer.acknowledge(msg, txn=txn)
    m, l = txn.txn_id
    txn_id = f"({m},{l})"

    stats = js(admin_cli, "transactions", "coordinator-stats")
    assert stats[str(m)]["ongoingTxnSize"] == 1 and stats[str(m)]["state"] == "Ready"
    table = rows(ok(admin_cli, "transactions", "coordinator-stats"))
    assert table[0][:4] == ["COORDINATOR", "STATE", "ONGOING", "COMMITTED"]
    assert table[1][:3] == [str(m), "Ready", "1"]
    assert list(js(admin_cli, "transactions", "coordinator-stats", "-c", str(m))) == [str(m)]

    meta = js(admin_cli, "transactions", "transaction-metadata", "-m", str(m), "-l", str(l))
    assert meta["txnId"] == txn_id and meta["status"] == "OPEN"
    assert list(meta["producedPartitions"]) == [topic]
    text = ok(admin_cli, "transactions", "transaction-metadata", "-m", str(m), "-l", str(l))
    assert ["status", "OPEN"] in rows(text) and [topic, "s"] in rows(text)

    assert txn_id in js(admin_cli, "transactions", "slow-transactions", "-t", "0ms")
    assert js(admin_cli, "transactions", "slow-transactions", "-t", "10m") == {}
    assert rows(ok(admin_cli, "transactions", "slow-transactions", "-t", "1ms"))[1][:2] == [txn_id, "OPEN"]

    buffer = js(admin_cli, "transactions", "transaction-buffer-stats", "-t", "cli-txn")
    assert buffer["ongoingTxnSize"] == 1 and buffer["ongoingTxns"] == [txn_id]
    assert ["ongoingTxnSize", "1"] in rows(ok(admin_cli, "transactions", "transaction-buffer-stats",
                                              "-t", topic))
    pending = js(admin_cli, "transactions", "pending-ack-stats", "-t", "cli-txn", "-s", "s")
    assert pending["ongoingTxnSize"] == 1 and list(pending["ongoingTxns"]) == [txn_id]
    assert [txn_id, "1", "false"] in rows(ok(admin_cli, "transactions", "pending-ack-stats",
                                            "-t", "cli-txn", "-s", "s"))

    assert js(admin_cli, "transactions", "abort-transaction", "-m", str(m), "-l", str(l)) == {
        "result": "ok", "txnId": txn_id}
    assert js(admin_cli, "transactions", "transaction-metadata", "-m", str(m), "-l", str(l))["status"] == "ABORTED"
    again = consumer.receive(timeout_millis=10000)  # the ack was released
    assert again.data() == b"seed" and again.redelivery_count() == 1
    with pytest.raises(magnetar.InvalidTxnStatusError):
        txn.commit()


def test_transaction_refusals_and_usage_errors(admin_cli):
    code, out, err = admin_cli("transactions", "transaction-metadata", "-m", "0", "-l", "424242")
    assert (code, out) == (1, "")
    assert "(0,424242)" in err and "HTTP 404 TransactionNotFound" in err and "slow-transactions" in err
    code, _, err = admin_cli("transactions", "abort-transaction", "-m", "77", "-l", "1")
    assert code == 1 and "coordinator 77" in err and "coordinator-stats" in err
    code, _, err = admin_cli("transactions", "transaction-buffer-stats", "-t", "cli-nope")
    assert code == 1 and "cli-nope" in err and "topics list public/default" in err
    for args, words in ((["slow-transactions", "-t", "5"], "needs a number and a unit"),
                        (["slow-transactions", "-t", "1x"], "500ms, 10s, 1m"),
                        (["transaction-metadata", "-m", "-1", "-l", "0"], "not a transaction id part"),
                        (["pending-ack-stats", "-t", "t"], "required: --sub-name"),
                        (["transaction-buffer-stats", "-t", "bad$name"], "invalid topic 'bad$name'"),
                        (["get-transaction-key", "a&b"], "may not contain '&'"),
                        (["list-transaction-keys", "--page-size", "0"], "at least 1")):
        code, out, err = admin_cli("transactions", *args)
        assert (code, out) == (2, ""), args
        assert words in err, (args, err)


def _stable(key: dict) -> tuple:
    return key["owner"], key["transactionKey"], key["epoch"], key["coordinatorId"], key["transactions"]


KEYS = ["etl/orders daily?v=1#%25", "ключ-κλειδί", "plain-0", "plain-1", "plain-2"]


def test_transaction_key_commands(live, admin_cli):
    clients = [magnetar.Client(live.service_url, transaction_key=key) for key in KEYS]
    try:
        txns = [c.new_transaction() for c in clients]  # each client connects its key
        everything = js(admin_cli, "transactions", "list-transaction-keys")
        assert sorted(k["transactionKey"] for k in everything["transactionKeys"]) == sorted(KEYS)
        assert everything["nextPageToken"] is None
        # Two keys a page: only by following nextPageToken does the command see all five.
        paged = js(admin_cli, "transactions", "list-transaction-keys", "--page-size", "2")
        assert [_stable(k) for k in paged["transactionKeys"]] == [_stable(k) for k in everything["transactionKeys"]]
        assert paged["nextPageToken"] is None
        listed = ok(admin_cli, "transactions", "list-transaction-keys", "--owner", "anonymous")
        assert listed.splitlines()[0].split()[:3] == ["OWNER", "KEY", "EPOCH"]
        assert all(key in listed for key in KEYS) and str(txns[0].txn_id) in listed
        assert js(admin_cli, "transactions", "list-transaction-keys", "--owner", "nobody") == {
            "transactionKeys": [], "nextPageToken": None}

        key = js(admin_cli, "transactions", "get-transaction-key", "etl/orders daily?v=1#%25")
        assert key["owner"] == "anonymous" and key["transactionKey"] == "etl/orders daily?v=1#%25"
        assert key["transactions"] == [str(txns[0].txn_id)] and key["epoch"] >= 0
        assert isinstance(key["coordinatorId"], int) and key["createdAt"] <= key["lastActiveAt"]
        table = rows(ok(admin_cli, "transactions", "get-transaction-key", "ключ-κλειδί", "--owner", "anonymous"))
        assert ["transactionKey", "ключ-κλειδί"] in table and ["transactions", str(txns[1].txn_id)] in table

        deleted = js(admin_cli, "transactions", "delete-transaction-key", "etl/orders daily?v=1#%25")
        assert deleted["result"] == "ok" and deleted["abortedTransactions"] == [str(txns[0].txn_id)]
        with pytest.raises(magnetar.MagnetarError):  # its transaction was aborted with the key
            txns[0].commit()
        assert "aborted its transactions" in ok(admin_cli, "transactions", "delete-transaction-key", "plain-0")
        remaining = js(admin_cli, "transactions", "list-transaction-keys")["transactionKeys"]
        assert sorted(k["transactionKey"] for k in remaining) == sorted(KEYS[1:2] + KEYS[3:])
    finally:
        for c in clients:
            c.close()


def test_console_script_exit_codes_for_keys(live):
    """The installed script: 0, 1 with the reason and the fix, 2, 3 (what scripts test)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAGNETAR_ADMIN_URL", "MAGNETAR_AUTH_TOKEN")}

    def cli(*args: str, url: str = live.admin_url) -> subprocess.CompletedProcess:
        return subprocess.run([command_path("magnetar-admin"), "--admin-url", url, *args],
                              capture_output=True, text=True, timeout=60, env=env)

    p = cli("-o", "json", "transactions", "list-transaction-keys")
    assert p.returncode == 0 and "transactionKeys" in json.loads(p.stdout)
    p = cli("transactions", "get-transaction-key", "never/used key")
    assert p.returncode == 1 and p.stdout == ""
    assert "never/used key" in p.stderr and "HTTP 404 TransactionKeyNotFound" in p.stderr
    assert "list-transaction-keys" in p.stderr
    p = cli("transactions", "delete-transaction-key", "x" * 256)
    assert p.returncode == 2 and "at most 255 bytes" in p.stderr
    p = cli("transactions", "coordinator-stats", url=live.url("broker-0") + "/nothing-here")
    assert p.returncode == 1 and "HTTP 404" in p.stderr
    # A URL that answers 200 with something else (here a broker's Prometheus page).
    p = cli("transactions", "coordinator-stats", url=live.url("broker-0") + "/metrics?")
    assert p.returncode == 3 and p.stdout == "" and "did not answer as the Magnetar admin service" in p.stderr
    live.freeze("admin")  # accepts connections, answers nothing
    try:
        p = cli("--timeout", "1", "transactions", "coordinator-stats")
        assert p.returncode == 3 and "timed out" in p.stderr and "--admin-url" in p.stderr
    finally:
        live.thaw("admin")
