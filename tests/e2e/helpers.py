"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import magnetar
from tests.waiting import wait_until

# The broker's defaults for namespaces that set no policy (TEST_ENV keeps everything
# instead): Pulsar's retention 0.  With them, a partition's data is trimmed by the
# lifecycle as soon as the rules allow, as a new user's would be.
SHIPPED_RETENTION = {"MAGNETAR_DEFAULT_RETENTION_TIME_MINUTES": "0", "MAGNETAR_DEFAULT_RETENTION_SIZE_MB": "0"}


def wheel_client(url: str, **options):
    """A ``pulsar.Client`` (the real wheel) on ``url`` with the tests' timeouts
    (``options`` override them) and its log in the test's log."""
    import logging

    import pulsar  # only the Pulsar-protocol tests need the wheel

    options = {"operation_timeout_seconds": 10, "connection_timeout_ms": 5000} | options
    return pulsar.Client(url, logger=logging.getLogger("pulsar-client"), **options)


def lifecycle_passes(cluster) -> list[int]:
    """Each running broker's completed storage-lifecycle passes."""
    counts = []
    for url in cluster.broker_urls:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
            m = re.search(r"^magnetar_broker_lifecycle_passes_total (\S+)$", resp.read().decode(), re.M)
        counts.append(int(float(m[1])) if m else 0)
    return counts


def two_more_passes(cluster) -> None:
    """Wait until every broker completed two more storage-lifecycle passes: whatever the
    lifecycle would do to data already there, it has done (one pass may have begun before)."""
    start = lifecycle_passes(cluster)
    wait_until(lambda: all(now >= then + 2 for now, then in zip(lifecycle_passes(cluster), start)), 10,
               "two more storage-lifecycle passes on every broker")


def commit_in_background(txn) -> tuple[threading.Thread, dict]:
    """Start ``txn.commit()`` on a thread (it blocks while a service is down or frozen);
    the dict gets "ok" (the time it returned) or "error" (what it raised)."""
    outcome: dict = {}

    def commit():
        try:
            txn.commit()
            outcome["ok"] = time.monotonic()
        except Exception as exc:  # the caller's assertions report it
            outcome["error"] = exc

    committer = threading.Thread(target=commit)
    committer.start()
    return committer, outcome


def read_all(client, topic: str) -> list[bytes]:
    """Every message a reader from the earliest position sees now."""
    reader = client.create_reader(topic, magnetar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10000).data())
    reader.close()
    return out


_EXCLUSIVE_PRODUCER = """
import sys, magnetar
client = magnetar.Client(sys.argv[1])
producer = client.create_producer(sys.argv[2], access_mode=magnetar.ProducerAccessMode.Exclusive)
print("ready", flush=True)
for line in sys.stdin:
    try:
        producer.send(line.strip().encode())
        print("ok", flush=True)
    except magnetar.MagnetarError as exc:
        print(type(exc).__name__, flush=True)
"""


def exclusive_producer_process(service_url: str, topic: str) -> subprocess.Popen:
    """An Exclusive producer in its own process (so it can be frozen and killed): each
    line written to its stdin is sent; it answers "ok" or the exception's class name."""
    proc = subprocess.Popen([sys.executable, "-c", _EXCLUSIVE_PRODUCER, service_url, topic],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def send_line(proc: subprocess.Popen, payload: str) -> str:
    proc.stdin.write(payload + "\n")
    return proc.stdout.readline().strip()


def grant(cluster, namespace: str, role: str, superuser_token: str,
          actions: tuple[str, ...] = ("produce", "consume")) -> None:
    """Let ``role`` produce and consume on ``namespace`` (auth on: docs/security.md)."""
    req = urllib.request.Request(
        f"{cluster.admin_url}/admin/v2/namespaces/{namespace}/permissions/{role}",
        data=json.dumps(list(actions)).encode(), method="POST",
        headers={"Authorization": f"Bearer {superuser_token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 204


def key_binding(cluster, key: str) -> tuple[int, int]:
    """(coordinator id, epoch) of one of anonymous's transaction keys, from the admin API."""
    url = (f"{cluster.admin_url}/admin/v2/transactions/transaction-keys/"
           f"{urllib.parse.quote(key, safe='')}?owner=anonymous")
    with urllib.request.urlopen(url, timeout=10) as resp:
        answer = json.loads(resp.read())
    return answer["coordinatorId"], answer["epoch"]


def keys_for_each_consumer(cluster, topic: str, subscription: str, per_consumer: int,
                           prefix: str = "key-") -> dict[str, list[str]]:
    """``per_consumer`` keys for each consumer of a Key_Shared subscription, by consumer
    name: the keys the broker's hash ring gives that consumer, computed from the ring it
    builds (its consumers' ids and names, read from the topic's stats).  A test that sends
    these knows where each must go, instead of hoping a few random keys split (8 keys on
    two consumers all landed on one in ~1% of runs)."""
    from magnetar_broker.subscription.dispatch import HashRing, key_hash

    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{cluster.admin_url}/admin/v2/persistent/{path}/stats", timeout=10) as resp:
        consumers = json.loads(resp.read())["subscriptions"][subscription]["consumers"]
    ring = HashRing((c["consumerId"], c["consumerName"]) for c in consumers)
    name_of = {c["consumerId"]: c["consumerName"] for c in consumers}
    chosen: dict[str, list[str]] = {c["consumerName"]: [] for c in consumers}
    for i in range(1000):
        key = f"{prefix}{i}"
        mine = chosen[name_of[ring.owner(key_hash(key))]]
        if len(mine) < per_consumer:
            mine.append(key)
        if all(len(keys) == per_consumer for keys in chosen.values()):
            return chosen
    raise AssertionError(f"1000 keys did not give each of {sorted(chosen)} {per_consumer} keys")


def admin(cluster, method: str, path: str, body=None) -> tuple[int, object]:
    """An admin API call as JSON: (status, decoded body or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(cluster.admin_url + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
