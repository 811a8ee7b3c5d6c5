"""The admin service with a real broker (in this process, on its own port) and the real
client: live stats, brokers and ownership, and a forced delete that fences the broker
so nothing it writes afterwards lands in the database."""

from __future__ import annotations

import pytest

import magnetar
from magnetar_broker.app import build_app as build_broker
from magnetar_broker.settings import BrokerSettings
from magnetar_runtime.local.postgres import free_port
from tests.integration.admin.conftest import ServerThread, http
from tests.waiting import wait_until

P = "/admin/v2/persistent/public/default"
TOPIC = "persistent://public/default/live"


def until(condition, what: str, timeout: float = 20.0):
    return wait_until(condition, timeout, what)


@pytest.fixture
def broker(database_url):
    settings = BrokerSettings(database_url=database_url, port=free_port(), broker_id="broker-live",
                              heartbeat_interval_ms=200, lease_ttl_ms=2000, session_timeout_ms=5000,
                              keepalive_interval_ms=500, allow_auto_topic_creation=False,
                              db_pool_size=4)
    server = ServerThread(build_broker(settings), settings.port).start()
    until(lambda: http("GET", server.url + "/readyz")[0] == 200, "the broker to be ready")
    yield server
    server.stop()


@pytest.fixture
def client(broker):
    c = magnetar.Client(broker.url)
    yield c
    c.close()


def test_live_stats_brokers_and_ownership(admin, broker, client):
    admin.ok("PUT", f"{P}/live")
    producer = client.create_producer(TOPIC, producer_name="p-live")
    consumer = client.subscribe(TOPIC, "audit", consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=magnetar.InitialPosition.Earliest)
    for i in range(3):
        producer.send(f"m{i}".encode())
    assert admin.ok("GET", "/admin/v2/brokers") == [broker.url]
    owners = admin.ok("GET", "/admin/v2/brokers/ownership")
    assert [(o["topic"], o["brokerId"], o["brokerUrl"], o["brokerAlive"]) for o in owners] == \
        [(TOPIC, "broker-live", broker.url, True)]

    stats = admin.ok("GET", f"{P}/live/stats")
    assert stats["liveStats"] is True and stats["ownerBroker"] == "broker-live"
    assert [p["producerName"] for p in stats["publishers"]] == ["p-live"]
    assert stats["msgInCounter"] == 3 and stats["accessMode"] == "Shared"
    audit = stats["subscriptions"]["audit"]
    assert audit["type"] == "Shared" and len(audit["consumers"]) == 1 and audit["msgBacklog"] == 3

    msg = consumer.receive(timeout_millis=10000)
    consumer.acknowledge(msg)
    until(lambda: admin.ok("GET", f"{P}/live/stats")["subscriptions"]["audit"]["msgBacklog"] == 2,
          "the acknowledgement to reach the backlog")
    internal = admin.ok("GET", f"{P}/live/internalStats")
    assert internal["ownerBroker"] == "broker-live" and internal["lastConfirmedEntry"].endswith(":-1")
    assert internal["numberOfMessages"] == 3


def test_forced_delete_fences_the_broker(admin, broker, client):
    admin.ok("PUT", f"{P}/live")
    producer = client.create_producer(TOPIC, producer_name="p-live", send_timeout_millis=3000)
    producer.send(b"before")
    reason = admin.refused("DELETE", f"{P}/live", status=409)
    assert "1 connected producer(s)" in reason
    assert admin.call("DELETE", f"{P}/live?force=true") == (204, None)
    until(lambda: TOPIC not in http("GET", broker.url + "/internal/v1/owned-topics")[1]["topics"],
          "the broker to let the topic go")
    with pytest.raises(magnetar.TopicNotFound):  # auto-creation is off: it stays deleted
        producer.send(b"after")
    for table in ("topics", "topic_owners", "entries", "producer_sequences"):
        assert admin.sql(f"SELECT count(*) AS n FROM {table}") == [{"n": 0}], table
