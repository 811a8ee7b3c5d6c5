"""What Pulsar applications rely on beyond produce and consume (issue 29), with the real
`pulsar-client` wheel against a real local Magnetar: seek sequences as Pulsar answers
them, refused commands answered at once with their request id, named listeners, the
HTTP lookup (an http:// service URL), partitions of a topic not created yet, the
examine-message REST body, non-persistent topics refused at once.

One cluster for the module; each test uses its own topics.  Where a test proves that
something is refused "at once", the wheel's operation timeout is long (30 s) and the
test checks the error's type: a retried refusal ends in pulsar.Timeout instead.
"""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_runtime.local.cluster import LocalCluster
from tests.e2e.conftest import TEST_ENV
from tests.e2e.helpers import wheel_client
from tests.e2e.pulsar_wire import Wire, WireError

TIMEOUT_MS = 10_000
Type = pb.BaseCommand.Type
_topics = itertools.count()


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/details-{prefix}-{next(_topics)}"


@pytest.fixture(scope="module")
def magnetar(postgres, migrated_template, tmp_path_factory):
    url = postgres.create_database("e2e_pulsar_details", template=migrated_template)
    cluster = LocalCluster(tmp_path_factory.mktemp("pulsar-details"), database_url=url, brokers=1,
                           registry=False, env=TEST_ENV)
    # An "external" Pulsar listener on the broker: the same port under another name
    # (localhost), so a client naming it is seen to use the URL it was answered.
    for name in cluster.names("broker"):
        port = cluster.services[name].pulsar_port
        cluster.service_env[name] = {"MAGNETAR_ADVERTISED_PULSAR_LISTENERS": f"external:pulsar://localhost:{port}"}
    cluster.start()
    yield cluster
    cluster.close()
    postgres.drop_database("e2e_pulsar_details")


def pulsar_client(url: str, **options) -> pulsar.Client:
    # The wheel's own default operation timeout (30 s): a refused command must fail at
    # once, not after it.
    return wheel_client(url, **({"operation_timeout_seconds": 30} | options))


@pytest.fixture
def client(magnetar):
    c = pulsar_client(magnetar.pulsar_service_url)
    yield c
    c.close()


def _get(url: str, accept: str = "*/*"):
    with urllib.request.urlopen(urllib.request.Request(url, headers={"accept": accept}), timeout=30) as resp:
        return resp.read(), resp.headers


# ---------------------------------------------------------------- seek


def _published(client, topic: str, count: int) -> tuple[list, list]:
    """``count`` messages hello-0.., consumed once; their ids and publish times."""
    consumer = client.subscribe(topic, "my-sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    for i in range(count):
        if i:
            time.sleep(0.005)  # distinct publish times, for the seeks by time
        producer.send(b"hello-%d" % i)
    ids, times = [], []
    for i in range(count):
        msg = consumer.receive(TIMEOUT_MS)
        assert msg.data() == b"hello-%d" % i
        ids.append(msg.message_id())
        times.append(msg.publish_timestamp())
        consumer.acknowledge(msg)
    return consumer, (ids, times)


def test_seeks_on_a_consumer_and_a_reader_land_where_pulsar_lands(client):
    # The upstream client's own sequence: each seek is followed at once by a receive.
    # Answered before the consumer was disconnected, the wheel reconnected from what it
    # had read: the time seek after the id seek gave hello-61 (not hello-42), and the
    # reader's id seek gave hello-2 (not hello-34).
    topic = new_topic("seek")
    consumer, (ids, times) = _published(client, topic, 100)
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(TIMEOUT_MS).data() == b"hello-0"
    consumer.seek(ids[50])
    assert consumer.receive(TIMEOUT_MS).data() == b"hello-51"
    consumer.seek(times[42])
    assert consumer.receive(TIMEOUT_MS).data() == b"hello-42"

    reader = client.create_reader(topic, pulsar.MessageId.latest)
    with pytest.raises(pulsar.Timeout):
        reader.read_next(100)
    reader.seek(pulsar.MessageId.earliest)
    assert [reader.read_next(TIMEOUT_MS).data() for _ in range(2)] == [b"hello-0", b"hello-1"]
    reader.seek(ids[33])
    assert [reader.read_next(TIMEOUT_MS).data() for _ in range(2)] == [b"hello-34", b"hello-35"]
    reader.seek(times[79])
    assert [reader.read_next(TIMEOUT_MS).data() for _ in range(2)] == [b"hello-79", b"hello-80"]
    reader.close()


# ---------------------------------------------------------------- refused commands


def _zero(message) -> None:
    """Set every required field of ``message`` to a zero value (recursively)."""
    for field in message.DESCRIPTOR.fields:
        if not field.is_required:
            continue
        if field.message_type is not None:
            _zero(getattr(message, field.name))
        elif field.enum_type is not None:
            setattr(message, field.name, field.enum_type.values[0].number)
        else:
            setattr(message, field.name, field.default_value)


def test_every_refused_command_carries_its_request_id(magnetar):
    """Frame by frame: each command that has a request id, sent bare (required fields
    missing) and then filled with zero values (so its handler runs and refuses it), is
    answered with a frame carrying that request id: no client waits out its timeout."""
    wire = Wire(magnetar.pulsar_service_url)
    try:
        request_id = itertools.count(10_000)
        for field in pb.BaseCommand.DESCRIPTOR.fields:
            if field.number == 1:
                continue
            body_type = getattr(pb, field.message_type.name)
            if "request_id" not in body_type.DESCRIPTOR.fields_by_name:
                continue
            for filled in (False, True):
                body = body_type()
                if filled:
                    _zero(body)
                rid = body.request_id = next(request_id)
                wire.send_raw(pb.BaseCommand(type=field.number, **{field.name: body}))
                answer = wire.wait_for(lambda f, rid=rid: getattr(f.body, "request_id", None) == rid)
                if answer.type == Type.ERROR:
                    assert answer.body.message, Type.Name(field.number)
    finally:
        wire.close()


def test_get_schema_of_a_topic_without_one_is_answered_at_once(magnetar):
    wire = Wire(magnetar.pulsar_service_url)
    try:
        reply = wire.request(pb.CommandGetSchema(topic=new_topic("no-schema")), Type.GET_SCHEMA_RESPONSE)
    except WireError as exc:
        raise AssertionError(f"GET_SCHEMA answered ERROR: {exc}") from None
    finally:
        wire.close()
    # Pulsar's answer for "no schema", which a client reads as such.
    assert reply.error_code == pb.TopicNotFound and not reply.HasField("schema")


# ---------------------------------------------------------------- named listeners


def test_a_lookup_answers_the_listener_the_client_names(magnetar):
    topic = new_topic("listener")
    wire = Wire(magnetar.pulsar_service_url)
    port = magnetar.pulsar_service_url.rsplit(":", 1)[1]
    try:
        def lookup(name: str) -> str:
            cmd = pb.CommandLookupTopic(topic=topic)
            if name:
                cmd.advertised_listener_name = name
            return wire.request(cmd, Type.LOOKUP_RESPONSE).broker_service_url

        assert lookup("") == lookup("internal") == magnetar.pulsar_service_url
        assert lookup("external") == f"pulsar://localhost:{port}"
        with pytest.raises(WireError, match="NotAllowedError.*'test'.*external, internal"):
            lookup("test")
    finally:
        wire.close()
    external = pulsar_client(magnetar.pulsar_service_url, listener_name="external")
    try:
        producer = external.create_producer(topic)
        producer.send(b"through the external listener")
        reader = external.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(TIMEOUT_MS).data() == b"through the external listener"
    finally:
        external.close()
    # A name no broker advertises: refused at once (retried, it would end in Timeout).
    unknown = pulsar_client(magnetar.pulsar_service_url, listener_name="test")
    try:
        with pytest.raises(pulsar.NotAllowedError):
            unknown.create_producer(topic)
    finally:
        unknown.close()


# ---------------------------------------------------------------- HTTP lookup, partitions


def test_an_http_service_url_looks_topics_up_over_http(magnetar):
    name = f"details-http-{next(_topics)}"
    body, _ = _get(f"{magnetar.admin_url}/lookup/v2/topic/persistent/public/default/{name}")
    assert json.loads(body) == {"brokerUrl": magnetar.pulsar_service_url, "brokerUrlTls": "",
                                "httpUrl": magnetar.service_url, "httpUrlTls": ""}
    port = magnetar.pulsar_service_url.rsplit(":", 1)[1]
    body, _ = _get(f"{magnetar.admin_url}/lookup/v2/topic/persistent/public/default/{name}?listenerName=external")
    assert json.loads(body)["brokerUrl"] == f"pulsar://localhost:{port}"
    # The wheel given the http:// URL: partitions and lookups over HTTP, then pulsar://.
    over_http = pulsar_client(magnetar.admin_url)
    try:
        producer = over_http.create_producer(f"persistent://public/default/{name}")
        producer.send(b"looked up over http")
        consumer = over_http.subscribe(f"persistent://public/default/{name}", "s",
                                       initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(TIMEOUT_MS).data() == b"looked up over http"
    finally:
        over_http.close()


def test_partitions_of_a_topic_not_created_yet_is_zero(magnetar):
    base = f"{magnetar.admin_url}/admin/v2/persistent/public/default/details-missing-{next(_topics)}/partitions"
    # As Pulsar: a client asking before it produces learns "not partitioned", not 404.
    assert json.loads(_get(base)[0]) == {"partitions": 0}
    assert json.loads(_get(base + "?checkAllowAutoCreation=true")[0]) == {"partitions": 0}


# ---------------------------------------------------------------- REST bodies


def test_examine_message_answers_the_payload_with_pulsar_headers(magnetar, client):
    name = f"details-examine-{next(_topics)}"
    producer = client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
    for i in range(3):
        producer.send(b"m%d" % i, properties={"k": str(i)})
    path = f"{magnetar.admin_url}/admin/v2/persistent/public/default/{name}/examinemessage"
    body, headers = _get(path + "?initialPosition=earliest&messagePosition=2")
    assert body == b"m1"
    assert headers["X-Pulsar-PROPERTY-k"] == "1" and headers["X-Pulsar-Message-ID"].startswith("0:")
    body, _ = _get(path + "?initialPosition=latest&messagePosition=1")
    assert body == b"m2"
    answer = json.loads(_get(path + "?initialPosition=latest&messagePosition=3", "application/json")[0])
    assert answer["messages"][0]["properties"] == {"k": "0"}
    with pytest.raises(urllib.error.HTTPError) as missing:
        _get(path + "?initialPosition=earliest&messagePosition=4")
    assert missing.value.code == 404


# ---------------------------------------------------------------- non-persistent topics


def test_non_persistent_topics_are_refused_at_once(magnetar, client):
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer("non-persistent://public/default/details-np")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe("non-persistent://public/default/details-np", "s")
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(f"{magnetar.admin_url}/lookup/v2/topic/non-persistent/public/default/details-np")
    assert refused.value.code == 400 and b"non-persistent" in refused.value.read()
