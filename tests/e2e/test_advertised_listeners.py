"""Advertised listeners (issue 19, item 4): a client outside the cluster names the
listener it can reach (``listener_name="external"``) and every lookup — topic owner,
coordinators, registry — answers that listener's URLs; a client that names none gets
the internal ones.

Two networks on one machine: each service binds 0.0.0.0 and advertises its internal
URL on 127.0.0.1 and an ``external`` one on 127.0.0.2 (a second loopback address that
reaches the same process, as a NodePort or a load balancer reaches a pod).  Which URLs a
client really used is read from its sessions and lookups, not assumed.
"""

from __future__ import annotations

import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest
from magnetar_runtime.local.postgres import free_port

pytestmark = pytest.mark.e2e

INTERNAL_HOST, EXTERNAL_HOST = "127.0.0.1", "127.0.0.2"
NAMES = ["broker-0", "broker-1", "coordinator-0", "registry"]


def _on_two_networks(cluster_factory, names, **options):
    ports = {name: free_port() for name in names}
    return cluster_factory(
        brokers=2, registry=True, ports=ports, env={"MAGNETAR_HOST": "0.0.0.0"},
        service_env={name: {"MAGNETAR_ADVERTISED_LISTENERS":
                            f"external:http://{EXTERNAL_HOST}:{port}"}
                     for name, port in ports.items()}, **options)


@pytest.fixture(scope="module")
def two_networks(module_cluster_factory):
    """One for the module: its tests only look services up and send on topics of their own."""
    return _on_two_networks(module_cluster_factory, NAMES)


def _hosts(urls) -> set[str]:
    return {url.split("//")[1].split(":")[0] for url in urls}


def _use(client, topic: str) -> list[bytes]:
    """Produce in a transaction and plainly, consume; what the consumer got."""
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    with client.new_transaction() as txn:
        producer.send(b"in-txn", txn=txn)
    producer.send(b"plain")
    got = [consumer.receive(timeout_millis=10000).data() for _ in range(2)]
    consumer.close()
    producer.close()
    return got


def test_an_external_client_is_answered_external_urls_and_a_default_one_internal(two_networks):
    cluster = two_networks
    external_url = cluster.service_url.replace(INTERNAL_HOST, EXTERNAL_HOST)
    inside = magnetar.Client(cluster.service_url)
    outside = magnetar.Client(external_url, listener_name="external")
    try:
        for client, host in ((inside, INTERNAL_HOST), (outside, EXTERNAL_HOST)):
            topic = f"persistent://public/default/listeners-{host}"
            assert _use(client, topic) == [b"in-txn", b"plain"]
            core = client._client.core
            run = client._io.run
            assert _hosts([run(core.lookup(topic))]) == {host}
            assert _hosts((run(core.coordinators(fresh=True))).values()) == {host}
            assert _hosts(core.sessions._by_url) == {host}  # where it produced and consumed
        # Both partitions' owners, on either broker, answer per listener.
        for i in range(4):
            topic = f"persistent://public/default/spread-{i}"
            owner = outside._io.run(outside._client.core.lookup(topic))
            assert owner.startswith(f"http://{EXTERNAL_HOST}:")
    finally:
        inside.close()
        outside.close()


def test_a_keyed_external_client_reaches_the_registry_on_its_listener(two_networks):
    outside = magnetar.Client(two_networks.service_url.replace(INTERNAL_HOST, EXTERNAL_HOST),
                              listener_name="external", transaction_key="listeners-key")
    try:
        assert outside.connect_transaction_key() == 0
        registry = outside._client._key._registry_url
        assert _hosts([registry]) == {EXTERNAL_HOST}
        with outside.new_transaction() as txn:
            outside.create_producer("keyed-listeners").send(b"k", txn=txn)
    finally:
        outside.close()


def test_a_listener_nobody_advertises_is_a_clear_bad_request(two_networks):
    client = magnetar.Client(two_networks.service_url, listener_name="public")
    try:
        with pytest.raises(BadRequest, match=r"advertises no listener 'public' \(it has: external, internal\)"):
            client.create_producer("no-such-listener")
        with pytest.raises(BadRequest, match="advertises no listener 'public'"):
            client.new_transaction()
        # A buggy or hostile client: any name a lookup cannot use is a 400, for every lookup.
        core, run = client._client.core, client._io.run
        for name in ("x" * 100_000, "a:b", "\x00", "../internal"):
            for path, request, reply in (
                    ("/v1/topics/lookup", pb.LookupRequest(topic="t", listener_name=name), pb.LookupResponse),
                    ("/v1/txn/coordinators", pb.LookupCoordinatorsRequest(listener_name=name),
                     pb.LookupCoordinatorsResponse),
                    ("/v1/registry/lookup", pb.LookupRegistryRequest(listener_name=name),
                     pb.LookupRegistryResponse)):
                # NUL is refused at the edge for every string field (magnetar_protocol.validate).
                with pytest.raises(BadRequest, match="listener name|listener_name contains a NUL"):
                    run(core.call(two_networks.service_url, path, request, reply))
        assert all(svc.alive for svc in two_networks.services.values())
    finally:
        client.close()


def test_coordinators_hosted_in_brokers_answer_the_external_listener_too(cluster_factory):
    """The hosting broker serves /v1/txn/coordinators with the broker's (listener-aware)
    handler, not the coordinator's."""
    cluster = _on_two_networks(cluster_factory, ["broker-0", "broker-1", "registry"],
                               coordinator_in_broker=True)
    outside = magnetar.Client(cluster.service_url.replace(INTERNAL_HOST, EXTERNAL_HOST),
                              listener_name="external")
    try:
        coordinators = outside._io.run(outside._client.core.coordinators(fresh=True))
        assert len(coordinators) == 2 and _hosts(coordinators.values()) == {EXTERNAL_HOST}
        assert _use(outside, "hosted-listeners") == [b"in-txn", b"plain"]
    finally:
        outside.close()
