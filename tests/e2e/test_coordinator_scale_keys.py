"""Scaling coordinators up (``kubectl scale statefulset/<release>-coordinator`` or the
admin's replicas endpoint: both only add pods with the next ordinals) does not move
existing transaction keys: a key stays bound to its coordinator and its transactions keep
working there, while new keys spread over the new coordinator too.  Real processes: the
cluster starts at one live coordinator, then coordinator 1 starts as a new pod would."""

from __future__ import annotations

import zlib

import pytest

import magnetar
from tests.e2e.helpers import key_binding
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def commit_one(cluster, key: str, topic: str, payload: bytes) -> None:
    """Connect ``key`` (fencing its previous holder) and commit one keyed transaction."""
    client = magnetar.Client(cluster.service_url, transaction_key=key)
    try:
        producer = client.create_producer(topic)
        txn = client.new_transaction()
        producer.send(payload, txn=txn)
        txn.commit()
    finally:
        client.close()


def hashes_to(key: str, coordinator: int, count: int) -> bool:
    # The registry's rule for new keys (registry/binding.py): crc32 of "owner&key".
    return zlib.crc32(f"anonymous&{key}".encode()) % count == coordinator


@pytest.mark.cluster(coordinators=2, registry=True)
def test_scaling_coordinators_up_keeps_existing_keys_bound(cluster):
    cluster.stop("coordinator-1")  # the deployment runs one coordinator
    topic = "persistent://public/default/scale-keys"
    # Keys that a 2-coordinator deployment would bind to coordinator 1: only stickiness
    # keeps them on coordinator 0.
    keys = [k for k in (f"job-{i}" for i in range(40)) if hashes_to(k, 1, 2)][:4]
    for key in keys:
        commit_one(cluster, key, topic, f"{key}:before".encode())
    before = {key: key_binding(cluster, key) for key in keys}
    assert {c for c, _ in before.values()} == {0}

    cluster.start("coordinator-1")  # scaled to 2: the next ordinal joins
    # New keys now spread over both (the registry sees coordinator 1 within a heartbeat).
    fresh = (k for k in (f"new-{i}" for i in range(1000)) if hashes_to(k, 1, 2))
    def a_new_key_on_coordinator_1() -> bool:
        key = next(fresh)
        commit_one(cluster, key, topic, f"{key}:new".encode())
        return key_binding(cluster, key)[0] == 1

    wait_until(a_new_key_on_coordinator_1, 20, "a new key bound to the added coordinator", interval=0)

    for key in keys:  # reconnect (a new epoch) and use each existing key again
        commit_one(cluster, key, topic, f"{key}:after".encode())
        coordinator, epoch = key_binding(cluster, key)
        assert coordinator == 0, f"{key} moved to coordinator {coordinator}"
        assert epoch == before[key][1] + 1
