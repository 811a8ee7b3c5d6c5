"""Authorization against a real local Magnetar with JWT authentication on
(docs/security.md "Authorization"): a table of role × operation -> allowed or denied,
each operation done for real through the client or the wire, then the revoke delay.

Roles: a superuser, tenant acme's admin, a role granted produce only, one granted
consume only, one with no grant, another tenant's admin; "owner" (produce and consume)
is the victim whose ids, subscription and transaction the others try to use."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid

import jwt
import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

SECRET = "test-secret-of-at-least-32-bytes-long"
CACHE_MS = 1500
AUTH_ENV = {"MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
            "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin", "MAGNETAR_AUTH_POLICY_CACHE_MS": str(CACHE_MS)}
TOPIC = "persistent://acme/app/orders"
ROLES = ["admin", "acme-ops", "writer", "reader", "nobody", "other-ops"]

# operation -> allowed for each of ROLES, in order
EXPECTED = {
    "lookup":                          [1, 1, 1, 1, 0, 0],
    "auto-create":                     [1, 1, 1, 1, 0, 0],
    "produce":                         [1, 1, 1, 0, 0, 0],
    "consume":                         [1, 1, 0, 1, 0, 0],
    "consume with a dead-letter topic": [1, 1, 0, 0, 0, 0],  # the DLQ needs produce too
    "subscribe restricted sub":        [1, 1, 0, 0, 0, 0],
    "unsubscribe owner's sub":         [1, 1, 0, 0, 0, 0],
    "send via owner's producer id":    [0, 0, 0, 0, 0, 0],
    "close owner's producer id":       [0, 0, 0, 0, 0, 0],
    "fetch via owner's consumer id":   [0, 0, 0, 0, 0, 0],
    "unsubscribe via owner's consumer id": [0, 0, 0, 0, 0, 0],
    "keepalive owner's session":       [0, 0, 0, 0, 0, 0],
    "close owner's session":           [0, 0, 0, 0, 0, 0],
    "send in owner's txn":             [1, 0, 0, 0, 0, 0],
    "ack in owner's txn":              [1, 0, 0, 0, 0, 0],
    "txn status of owner's txn":       [1, 0, 0, 0, 0, 0],
    "broker internal endpoint":        [1, 0, 0, 0, 0, 0],
    "grant permission":                [1, 1, 0, 0, 0, 0],
}
# Refusals are these errors; anything else fails the test.
DENIED = (magnetar.AuthorizationError, magnetar.ProducerNotFound, magnetar.ConsumerNotFound,
          magnetar.SessionNotFound)


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


class Admin:
    def __init__(self, url: str):
        self.url = url

    def call(self, method: str, path: str, role: str = "admin", body=None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token(role)}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def ok(self, method: str, path: str, body=None) -> object:
        status, answer = self.call(method, path, body=body)
        assert status in (200, 204), (method, path, status, answer)
        return answer


def raw(client: magnetar.Client, url: str, path: str, request, response_type):
    """One protobuf call as the client's role, outside the client's own bookkeeping."""
    return client._io.run(client._client.core.call(url, path, request, response_type))


class Victim:
    """The owner's objects, made fresh for each attempt."""

    def __init__(self, cluster, owner: magnetar.Client):
        self.cluster, self.owner = cluster, owner

    def producer(self) -> tuple[magnetar.Producer, int, str]:
        name = f"victim-{uuid.uuid4().hex[:8]}"
        producer = self.owner.create_producer(TOPIC, producer_name=name)
        stats = _internal_stats(self.cluster.url(self.cluster.owner_of(TOPIC)), TOPIC)
        pid = next(p["producerId"] for p in stats["publishers"] if p["producerName"] == name)
        return producer, pid, self.cluster.url(self.cluster.owner_of(TOPIC))

    def consumer(self) -> tuple[magnetar.Consumer, int, str, str]:
        sub = f"victim-{uuid.uuid4().hex[:8]}"
        consumer = self.owner.subscribe(TOPIC, sub)
        stats = _internal_stats(self.cluster.url(self.cluster.owner_of(TOPIC)), TOPIC)
        cid = stats["subscriptions"][sub]["consumers"][0]["consumerId"]
        return consumer, cid, sub, self.cluster.url(self.cluster.owner_of(TOPIC))


def _internal_stats(broker_url: str, topic: str) -> dict:
    req = urllib.request.Request(f"{broker_url}/internal/v1/topic-stats?topic={topic}",
                                 headers={"Authorization": f"Bearer {token('admin')}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def attempt(op: str, role: str, client: magnetar.Client, victim: Victim, admin: Admin,
            subscriptions: callable) -> bool:
    """Do ``op`` as ``role``: True when it went through, False when it was refused."""
    cluster = victim.cluster
    broker = cluster.broker_urls[0]
    try:
        if op == "lookup":
            raw(client, broker, "/v1/topics/lookup", pb.LookupRequest(topic=TOPIC), pb.LookupResponse)
        elif op == "auto-create":
            topic = f"persistent://acme/app/auto-{role}"
            raw(client, broker, "/v1/topics/lookup", pb.LookupRequest(topic=topic), pb.LookupResponse)
            assert cluster.query("SELECT 1 FROM topics WHERE topic = $1", topic), "lookup did not create"
        elif op == "produce":
            client.create_producer(TOPIC).send(f"from {role}".encode())
        elif op == "consume":
            client.subscribe(TOPIC, f"own-{role}").close()
        elif op == "consume with a dead-letter topic":
            client.subscribe(TOPIC, f"dlq-{role}", consumer_type=magnetar.ConsumerType.Shared,
                             dead_letter_policy=magnetar.ConsumerDeadLetterPolicy(3)).close()
        elif op == "subscribe restricted sub":
            client.subscribe(TOPIC, "restricted", consumer_type=magnetar.ConsumerType.Shared).close()
        elif op == "unsubscribe owner's sub":
            # restricted-<role> exists (the owner made it) and lists only the owner.
            client.subscribe(TOPIC, f"restricted-{role}").unsubscribe()
            return f"restricted-{role}" not in subscriptions()
        elif op == "send via owner's producer id":
            _, pid, url = victim.producer()
            raw(client, url, "/v1/producers/send",
                pb.SendRequest(producer_id=pid, batch=producer_batch(10 ** 9), num_messages=1, sequence_id=10 ** 9,
                               highest_sequence_id=10 ** 9), pb.SendResponse)
            return True  # (it went through: the owner's dedup state would have moved)
        elif op == "close owner's producer id":
            producer, pid, url = victim.producer()
            raw(client, url, "/v1/producers/close", pb.CloseProducerRequest(producer_id=pid),
                pb.CloseProducerResponse)
            # A foreign id's close answers like an unknown one's: look whether it went.
            publishers = _internal_stats(url, TOPIC)["publishers"]
            producer.close()
            return pid not in [p["producerId"] for p in publishers]
        elif op == "fetch via owner's consumer id":
            consumer, cid, _, url = victim.consumer()
            raw(client, url, "/v1/consumers/fetch",
                pb.FetchRequest(consumer_id=cid, max_messages=1, wait_ms=0), pb.FetchResponse)
            return True
        elif op == "unsubscribe via owner's consumer id":
            consumer, cid, sub, url = victim.consumer()
            raw(client, url, "/v1/consumers/close",
                pb.CloseConsumerRequest(consumer_id=cid, unsubscribe=True), pb.CloseConsumerResponse)
            return sub not in subscriptions()
        elif op == "keepalive owner's session":
            session = _open_session(victim.owner, broker)
            raw(client, broker, "/v1/sessions/keepalive", pb.KeepAliveRequest(session_id=session),
                pb.KeepAliveResponse)
        elif op == "close owner's session":
            session = _open_session(victim.owner, broker)
            # A foreign session's close answers like an unknown one's: look whether it went.
            raw(client, broker, "/v1/sessions/close", pb.CloseSessionRequest(session_id=session),
                pb.CloseSessionResponse)
            try:
                raw(victim.owner, broker, "/v1/sessions/keepalive",
                    pb.KeepAliveRequest(session_id=session), pb.KeepAliveResponse)
            except magnetar.SessionNotFound:
                return True
            return False
        elif op == "send in owner's txn":
            txn = victim.owner.new_transaction()
            victim.owner.create_producer(TOPIC).send(b"owner's", txn=txn)  # registers the partition
            try:
                intruder = client.transaction_from_id(txn.txn_id)
                client.create_producer(TOPIC).send(f"{role} in owner's txn".encode(), txn=intruder)
            finally:
                txn.abort()
        elif op == "ack in owner's txn":
            sub = f"shared-{role}"
            owner_consumer = victim.owner.subscribe(TOPIC, sub, consumer_type=magnetar.ConsumerType.Shared,
                                                    initial_position=magnetar.InitialPosition.Earliest)
            txn = victim.owner.new_transaction()
            owner_consumer.acknowledge(owner_consumer.receive(timeout_millis=10000), txn=txn)
            owner_consumer.close()  # its other messages go back to the subscription
            try:
                intruder = client.transaction_from_id(txn.txn_id)
                consumer = client.subscribe(TOPIC, sub, consumer_type=magnetar.ConsumerType.Shared)
                consumer.acknowledge(consumer.receive(timeout_millis=10000), txn=intruder)
            finally:
                txn.abort()
        elif op == "txn status of owner's txn":
            txn = victim.owner.new_transaction()
            try:
                raw(client, cluster.coordinator_urls[0], "/v1/txn/status",
                    pb.TxnStatusRequest(txn=txn.txn_id.to_wire()), pb.TxnStatusResponse)
            finally:
                txn.abort()
        elif op == "broker internal endpoint":
            status, _ = Admin(broker).call("GET", "/internal/v1/owned-topics", role)
            return status == 200
        elif op == "grant permission":
            status, _ = admin.call("POST", "/admin/v2/namespaces/acme/app/permissions/somebody",
                                   role, ["produce"])
            return status == 204
        else:
            raise AssertionError(op)
    except DENIED:
        return False
    return True


def _open_session(client: magnetar.Client, url: str) -> str:
    return raw(client, url, "/v1/sessions/open", pb.OpenSessionRequest(client_name="victim"),
               pb.OpenSessionResponse).session_id


@pytest.mark.cluster(env=AUTH_ENV)
def test_role_by_operation_table(cluster):
    admin = Admin(cluster.admin_url)
    admin.ok("PUT", "/admin/v2/tenants/acme", {"adminRoles": ["acme-ops"]})
    admin.ok("PUT", "/admin/v2/tenants/other", {"adminRoles": ["other-ops"]})
    admin.ok("PUT", "/admin/v2/namespaces/acme/app")
    admin.ok("PUT", "/admin/v2/namespaces/other/ns")
    admin.ok("PUT", "/admin/v2/persistent/acme/app/orders")
    admin.ok("POST", "/admin/v2/namespaces/acme/app/permissions/owner", ["produce", "consume"])
    admin.ok("POST", "/admin/v2/namespaces/acme/app/permissions/writer", ["produce"])
    admin.ok("POST", "/admin/v2/namespaces/acme/app/permissions/reader", ["consume"])
    admin.ok("POST", "/admin/v2/namespaces/acme/app/permissions/subscription/restricted", ["owner"])
    for role in ROLES:
        admin.ok("POST", f"/admin/v2/namespaces/acme/app/permissions/subscription/restricted-{role}",
                 ["owner"])
    # Every grant is made before a broker first reads (and caches) the policies.
    url = cluster.service_url
    owner = magnetar.Client(url, auth_token=token("owner"))
    victim = Victim(cluster, owner)
    filler = owner.create_producer(TOPIC)
    for i in range(40):  # messages for the ack cases to receive
        filler.send(f"m{i}".encode())
    for role in ROLES:
        owner.subscribe(TOPIC, f"restricted-{role}").close()

    def subscriptions() -> list[str]:
        return admin.ok("GET", "/admin/v2/persistent/acme/app/orders/subscriptions")

    # The owner may do what the others may not with its own things (the positive control).
    producer, pid, purl = victim.producer()
    raw(owner, purl, "/v1/producers/send",
        pb.SendRequest(producer_id=pid, batch=producer_batch(10 ** 6), num_messages=1, sequence_id=10 ** 6,
                       highest_sequence_id=10 ** 6), pb.SendResponse)
    assert attempt("subscribe restricted sub", "owner", owner, victim, admin, subscriptions)

    actual: dict[str, list[int]] = {}
    for op in EXPECTED:
        row = []
        for role in ROLES:
            client = magnetar.Client(url, auth_token=token(role))
            try:
                row.append(int(attempt(op, role, client, victim, admin, subscriptions)))
            finally:
                client.close()
        actual[op] = row
    mismatches = {op: {"expected": EXPECTED[op], "actual": actual[op]}
                  for op in EXPECTED if actual[op] != EXPECTED[op]}
    assert not mismatches, f"roles {ROLES}: {json.dumps(mismatches, indent=1)}"
    owner.close()


def producer_batch(sequence_id: int) -> bytes:
    """One message whose sequence id agrees with the request's (the broker checks it)."""
    return pb.MessageBatch(messages=[pb.SingleMessage(payload=b"raw", sequence_id=sequence_id)]
                           ).SerializeToString()


@pytest.mark.cluster(env=AUTH_ENV)
def test_grants_take_effect_and_a_revoke_within_the_cache_delay(cluster):
    admin = Admin(cluster.admin_url)
    admin.ok("PUT", "/admin/v2/tenants/acme", {"adminRoles": ["acme-ops"]})
    admin.ok("PUT", "/admin/v2/namespaces/acme/app")
    app = magnetar.Client(cluster.service_url, auth_token=token("app"))
    with pytest.raises(magnetar.AuthorizationError, match="grant-permission"):
        app.create_producer(TOPIC)
    # The tenant's admin grants; invalid grants are 400 and change nothing.
    ops = "acme-ops"
    for bad in (["produce", "delete"], [], "produce", ["PRODUCE"]):
        status, body = admin.call("POST", "/admin/v2/namespaces/acme/app/permissions/app", ops, bad)
        assert status == 400, (bad, status, body)
    assert admin.call("POST", "/admin/v2/namespaces/acme/app/permissions/a%00b", ops, ["produce"])[0] == 400
    assert admin.call("GET", "/admin/v2/namespaces/acme/app/permissions", ops) == (200, {})
    assert admin.call("POST", "/admin/v2/persistent/acme/app/orders/permissions/app", ops,
                      ["produce"])[0] == 204
    assert admin.call("GET", "/admin/v2/persistent/acme/app/orders/permissions", ops) == (
        200, {"app": ["produce"]})
    def granted():
        try:
            return app.create_producer(TOPIC)
        except magnetar.AuthorizationError:
            return None

    # The refusal above is cached for up to CACHE_MS.
    producer = wait_until(granted, CACHE_MS / 1000 + 10, "the grant taking effect", interval=0.2)
    producer.send(b"granted")
    # Another topic of the namespace is not covered by a topic grant.
    with pytest.raises(magnetar.AuthorizationError):
        app.create_producer("persistent://acme/app/other")
    # Revoke: a new producer is refused within the cache delay; one that exists keeps working.
    assert admin.call("DELETE", "/admin/v2/persistent/acme/app/orders/permissions/app", ops)[0] == 204
    revoked_at = time.monotonic()
    while True:
        try:
            app.create_producer(TOPIC).close()
        except magnetar.AuthorizationError:
            break
        assert time.monotonic() - revoked_at < CACHE_MS / 1000 + 5, "the revoke never took effect"
        time.sleep(0.1)
    producer.send(b"still open")
    app.close()
    # Auto-creation never makes a name the admin API refuses, whoever asks.
    superuser = magnetar.Client(cluster.service_url, auth_token=token("admin"))
    for bad in ("persistent://acme/app/t-partition--1", "persistent://acme/app/-"):
        assert admin.call("PUT", "/admin/v2/persistent/acme/app/" + bad.rsplit("/", 1)[1])[0] == 400
        with pytest.raises(magnetar.InvalidTopicName, match="cannot auto-create"):
            superuser.create_producer(bad)
        assert not cluster.query("SELECT 1 FROM topics WHERE topic = $1", bad)
    superuser.close()


@pytest.mark.cluster(env=AUTH_ENV)
def test_ids_are_bound_to_their_session_too(cluster):
    """A producer or consumer id named with another session of the same role is unknown;
    with its own session (as the client sends it) it works."""
    admin = Admin(cluster.admin_url)
    admin.ok("PUT", "/admin/v2/tenants/acme")
    admin.ok("PUT", "/admin/v2/namespaces/acme/app")
    app = magnetar.Client(cluster.service_url, auth_token=token("admin"))
    victim = Victim(cluster, app)
    _, pid, url = victim.producer()
    other = _open_session(app, url)
    send = pb.SendRequest(producer_id=pid, batch=producer_batch(10 ** 6), num_messages=1,
                          sequence_id=10 ** 6, highest_sequence_id=10 ** 6, session_id=other)
    with pytest.raises(magnetar.ProducerNotFound):
        raw(app, url, "/v1/producers/send", send, pb.SendResponse)
    send.session_id = ""  # naming no session: the role alone decides
    raw(app, url, "/v1/producers/send", send, pb.SendResponse)
    _, cid, _, url = victim.consumer()
    with pytest.raises(magnetar.ConsumerNotFound):
        raw(app, url, "/v1/consumers/fetch",
            pb.FetchRequest(consumer_id=cid, max_messages=1, wait_ms=0, session_id=other),
            pb.FetchResponse)
    app.close()


LIMIT_ENV = AUTH_ENV | {"MAGNETAR_MAX_OPEN_TXNS_PER_ROLE": "300",
                        "MAGNETAR_MAX_NEW_TXNS_PER_ROLE_PER_S": "100000",
                        "MAGNETAR_TXN_LIMIT_REFRESH_S": "0.5"}


def _batch_new_txns(url: str, role: str, calls: int, count: int = 64) -> list[tuple[int, bytes]]:
    """The attack of issue 24: /v1/batch holding ``calls`` NewTxnRequest(count=64) with
    3-hour timeouts; (status, body) of each call."""
    call = pb.BatchCall(path="/v1/txn/new", body=pb.NewTxnRequest(
        count=count, timeout_ms=3 * 3600_000).SerializeToString())
    req = urllib.request.Request(
        url + "/v1/batch", data=pb.BatchRequest(calls=[call] * calls).SerializeToString(),
        method="POST", headers={"Authorization": f"Bearer {token(role)}",
                                "Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return [(r.status, r.body) for r in pb.BatchResponse.FromString(resp.read()).results]


@pytest.mark.cluster(brokers=1, registry=False, env=LIMIT_ENV)
def test_a_role_cannot_hold_more_open_transactions_than_its_limit(cluster):
    """Issue 24 finding 3: a role with no grants opened 197,004 OPEN transactions in
    2.9 s.  With MAGNETAR_MAX_OPEN_TXNS_PER_ROLE=300: four pools of 64 pass, the fifth
    and later are refused with NOT_ALLOWED naming the setting (the client raises it at
    once: retrying cannot help until the role ends some); a superuser is
    exempt; once the role's transactions end, it may open again."""
    [url] = cluster.coordinator_urls
    results = _batch_new_txns(url, "nobody", 8)
    statuses = [status for status, _ in results]
    assert statuses == [200] * 4 + [409] * 4, statuses
    err = pb.Error.FromString(results[-1][1])
    assert err.code == pb.NOT_ALLOWED and "MAGNETAR_MAX_OPEN_TXNS_PER_ROLE" in err.message
    assert "'nobody'" in err.message
    results += _batch_new_txns(url, "nobody", 1, count=44)  # exactly at the limit
    assert results[-1][0] == 200
    # The client raises its typed error for the same refusal.
    with magnetar.Client(cluster.service_url, auth_token=token("nobody")) as client:
        with pytest.raises(magnetar.NotAllowedError, match="MAGNETAR_MAX_OPEN_TXNS_PER_ROLE"):
            client.new_transaction()
    # Another role and a superuser are not held back by nobody's transactions.
    assert [s for s, _ in _batch_new_txns(url, "writer", 1)] == [200]
    assert [s for s, _ in _batch_new_txns(url, "admin", 8)] == [200] * 8
    # Ending them frees the role's count (read back every MAGNETAR_TXN_LIMIT_REFRESH_S).
    opened = [pb.NewTxnResponse.FromString(body) for status, body in results if status == 200]
    ends = [pb.BatchCall(path="/v1/txn/end", body=pb.EndTxnRequest(
        txn=pb.TxnId(most_bits=r.txn.most_bits, least_bits=least), action=pb.TXN_ABORT).SerializeToString())
        for r in opened for least in [r.txn.least_bits, *r.more_least_bits]]
    req = urllib.request.Request(
        url + "/v1/batch", data=pb.BatchRequest(calls=ends).SerializeToString(), method="POST",
        headers={"Authorization": f"Bearer {token('nobody')}", "Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert {r.status for r in pb.BatchResponse.FromString(resp.read()).results} == {200}
    wait_until(lambda: _batch_new_txns(url, "nobody", 1)[0][0] == 200, 30,
               "the role may open transactions again once its open ones ended")
