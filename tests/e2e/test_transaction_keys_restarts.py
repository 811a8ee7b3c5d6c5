"""Transaction keys across restarts of every service and of PostgreSQL (epochs never go
backwards, fencing still holds), and with authentication on (owner isolation, tokens,
superusers).  The rest of the key tests: test_transaction_keys_e2e.py."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request

import jwt
import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_runtime.local.cluster import LocalCluster
from tests.e2e.conftest import TEST_ENV
from tests.e2e.helpers import grant, read_all

pytestmark = pytest.mark.e2e

SECRET = "test-secret-of-at-least-32-bytes-long"
AUTH_ENV = {"MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
            "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"}


def token(role: str, secret: str = SECRET) -> str:
    return jwt.encode({"sub": role}, secret, algorithm="HS256")


def _restart(cluster: LocalCluster, what: str) -> None:
    if what == "postgres":
        cluster.postgres.kill()
        cluster.postgres.start()
    else:
        cluster.kill(what, signal.SIGKILL)
        cluster.start(what)


@pytest.mark.slow
def test_epochs_never_go_backwards_across_restarts_of_every_part(tmp_path):
    """Before each restart the key's holder has an open transaction with a send; after
    it a new holder connects: the epoch is one more, the old transaction is aborted
    (its commit: ExpiredTransactionError), the new holder's output commits."""
    with LocalCluster(tmp_path, env=TEST_ENV) as cluster:  # its own PostgreSQL, to kill
        holder = magnetar.Client(cluster.service_url, transaction_key="restart-K")
        assert holder.connect_transaction_key() == 0
        expected = []
        for epoch, part in enumerate(["registry", "coordinator-0", "broker-0", "postgres"], 1):
            old = holder.new_transaction()
            holder.create_producer("restart-out").send(b"zombie-%d" % epoch, txn=old)
            _restart(cluster, part)
            holder_next = magnetar.Client(cluster.service_url, transaction_key="restart-K")
            assert holder_next.connect_transaction_key() == epoch, f"after restarting {part}"
            with pytest.raises(magnetar.ExpiredTransactionError):
                old.commit()
            with pytest.raises(magnetar.NotAllowedError):
                holder.new_transaction()
            txn = holder_next.new_transaction()
            holder_next.create_producer("restart-out").send(b"live-%d" % epoch, txn=txn)
            txn.commit()
            expected.append(b"live-%d" % epoch)
            holder.close()
            holder = holder_next
        reader = magnetar.Client(cluster.service_url)
        assert read_all(reader, "restart-out") == expected
        reader.close()
        holder.close()


@pytest.mark.cluster(env=AUTH_ENV)
def test_authentication_owner_isolation_and_superusers(cluster):
    url = cluster.service_url
    with pytest.raises(magnetar.AuthenticationError, match="authentication is required"):
        magnetar.Client(url).create_producer("no-token")
    with pytest.raises(magnetar.AuthenticationError, match="refused"):
        magnetar.Client(url, auth_token=token("alice", "another-secret-of-at-least-32-bytes")
                        ).create_producer("bad-token")

    for role in ("alice", "bob"):
        grant(cluster, "public/default", role, token("admin"))
    # Two owners with the same key name never interfere.
    alice = magnetar.Client(url, transaction_key="shared", auth_token=token("alice"))
    bob = magnetar.Client(url, transaction_key="shared", auth_token=token("bob"))
    alice_txn = alice.new_transaction()
    alice.create_producer("auth-out").send(b"alice", txn=alice_txn)
    assert bob.connect_transaction_key() == 0  # bob&shared is its own key
    bob_txn = bob.new_transaction()
    # A role may not act on another role's transaction.
    with pytest.raises(magnetar.AuthorizationError):
        bob._io.run(bob._client.core.call(
            cluster.coordinator_urls[0], "/v1/txn/end",
            pb.EndTxnRequest(txn=alice_txn.txn_id.to_wire(), action=pb.TXN_ABORT), pb.EndTxnResponse))
    # Nor send or acknowledge in it: a broker registers a partition or a subscription with
    # a transaction (on its first send or ack there) only for the owner or a superuser.
    bob_plain = magnetar.Client(url, auth_token=token("bob"))
    intruder = bob_plain.transaction_from_id(alice_txn.txn_id)
    with pytest.raises(magnetar.AuthorizationError, match="neither its owner"):
        bob_plain.create_producer("auth-intruder").send(b"bob", txn=intruder)
    bob_plain.create_producer("auth-acks").send(b"plain")
    consumer = bob_plain.subscribe("auth-acks", "s", initial_position=magnetar.InitialPosition.Earliest)
    with pytest.raises(magnetar.AuthorizationError, match="neither its owner"):
        consumer.acknowledge(consumer.receive(timeout_millis=10000), txn=intruder)
    bob_plain.close()
    alice_txn.commit()
    bob_txn.abort()
    admin = magnetar.Client(url, auth_token=token("admin"))
    assert read_all(admin, "auth-out") == [b"alice"]
    assert read_all(admin, "auth-intruder") == []

    def call(method: str, path: str, role: str | None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token(role)}"} if role else {}
        req = urllib.request.Request(cluster.admin_url + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    keys = "/admin/v2/transactions/transaction-keys"
    assert call("GET", keys, None)[0] == 401
    status, mine = call("GET", keys, "alice")
    assert status == 200 and [(k["owner"], k["transactionKey"]) for k in mine["transactionKeys"]] == [
        ("alice", "shared")]
    assert call("GET", keys + "?owner=bob", "alice")[0] == 403
    assert call("DELETE", keys + "/shared?owner=bob", "alice")[0] == 403
    status, every = call("GET", keys, "admin")
    assert status == 200 and {k["owner"] for k in every["transactionKeys"]} == {"alice", "bob"}
    # Admin endpoints need a superuser; abortTransaction also lets the owner through.
    status, body = call("GET", "/admin/v2/tenants", "alice")
    assert status == 403 and body["code"] == "AuthorizationError"
    assert call("GET", "/admin/v2/tenants", "admin")[0] == 200
    open_txn = alice.new_transaction()
    m, least = open_txn.txn_id.most_bits, open_txn.txn_id.least_bits
    assert call("POST", f"/admin/v3/transactions/abortTransaction/{m}/{least}", "bob")[0] == 403
    assert call("POST", f"/admin/v3/transactions/abortTransaction/{m}/{least}", "alice")[0] == 204
    with pytest.raises(magnetar.InvalidTxnStatusError):
        open_txn.commit()
    # The owner deletes its own key; a later connect continues from the epoch.
    assert call("DELETE", keys + "/shared", "bob")[0] == 200
    assert magnetar.Client(url, transaction_key="shared",
                           auth_token=token("bob")).connect_transaction_key() == 2
    for c in (alice, bob, admin):
        c.close()
