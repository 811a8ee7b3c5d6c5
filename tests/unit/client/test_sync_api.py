"""The sync facade: one loop thread per client, thread-safe objects, the public names."""

import inspect
import threading
import time

import pytest

import magnetar
import magnetar.asyncio as aio
from magnetar_protocol import errors
from magnetar_protocol import magnetar_pb2 as pb

from .fakes import FakeTransport, batches, decode

URL = "http://any-broker:8080"


def test_every_error_of_the_one_hierarchy_is_exported_by_both_apis():
    classes = {name: cls for name, cls in vars(errors).items()
               if isinstance(cls, type) and issubclass(cls, errors.MagnetarError)}
    assert len(classes) > 25
    for module in (magnetar, aio):
        for name, cls in classes.items():
            assert getattr(module, name) is cls, f"{module.__name__}.{name}"
    for name in ["ProducerQueueIsFull", "AlreadyClosed"]:
        assert issubclass(getattr(magnetar, name), magnetar.MagnetarError)


def test_the_contract_names_exist_with_the_same_names_in_asyncio():
    for name in ["Client", "Producer", "Consumer", "Reader", "Message", "MessageId", "TxnID",
                 "ProducerAccessMode", "ConsumerType", "InitialPosition", "Result"]:
        assert hasattr(magnetar, name) and hasattr(aio, name), name
    assert [m.name for m in magnetar.ProducerAccessMode] == [
        "Shared", "Exclusive", "WaitForExclusive", "ExclusiveWithFencing"]
    assert [m.name for m in magnetar.ConsumerType] == ["Exclusive", "Shared", "Failover", "KeyShared"]
    assert [m.name for m in magnetar.InitialPosition] == ["Latest", "Earliest"]
    for cls, methods in [(aio.Producer, ["send", "flush", "close"]),
                         (aio.Consumer, ["receive", "acknowledge", "acknowledge_cumulative", "seek",
                                         "unsubscribe", "close", "redeliver_unacknowledged_messages"]),
                         (aio.Reader, ["read_next", "has_message_available", "seek", "close"]),
                         (aio.Client, ["create_producer", "subscribe", "create_reader", "close"])]:
        for name in methods:
            assert inspect.iscoroutinefunction(getattr(cls, name)), f"{cls.__name__}.{name}"
    sig = inspect.signature(magnetar.Client.create_producer)
    assert list(sig.parameters)[1:7] == ["topic", "producer_name", "initial_sequence_id",
                                         "access_mode", "batching_enabled", "send_timeout_millis"]
    assert list(inspect.signature(magnetar.Producer.send).parameters)[1:] == [
        "data", "properties", "partition_key", "sequence_id", "event_timestamp", "txn", "ordering_key",
        "deliver_at", "deliver_after"]


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
def client(transport):
    client = magnetar.Client(URL, transport=transport, operation_timeout_seconds=2)
    yield client
    client.close()


def test_send_blocks_until_the_receipt(client, transport):
    producer = client.create_producer("t", batching_max_publish_delay_ms=60_000)
    started = time.monotonic()
    msg_id = producer.send(b"now", properties={"a": "b"})
    assert time.monotonic() - started < 30
    # A sync send does not wait for the batching delay (pulsar-client flushes too).
    assert msg_id == magnetar.MessageId(-1, 0, 0, 1)
    assert dict(decode(batches(transport)[0])[0].properties) == {"a": "b"}


def test_send_async_from_many_threads_keeps_each_threads_order(client, transport):
    producer = client.create_producer("t", batching_max_messages=50, max_pending_messages=64)
    done = threading.Event()
    results = []
    lock = threading.Lock()
    total = 4 * 500

    def on_sent(result, msg_id):
        with lock:
            results.append(result)
            if len(results) == total:
                done.set()

    def writer(name):
        for i in range(500):
            producer.send_async(f"{name}:{i}".encode(), on_sent)

    threads = [threading.Thread(target=writer, args=(n,)) for n in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    producer.flush()
    assert done.wait(10)
    assert set(results) == {magnetar.Result.Ok}
    payloads = [m.payload.decode() for b in batches(transport) for m in decode(b)]
    for name in "abcd":
        mine = [int(p.split(":")[1]) for p in payloads if p.startswith(name)]
        assert mine == list(range(500))
    seqs = [m.sequence_id for b in batches(transport) for m in decode(b)]
    assert seqs == list(range(total))


def test_send_raises_the_brokers_error(client, transport):
    producer = client.create_producer("t")
    transport.handlers["/v1/producers/send-batches"] = lambda url, req: pb.SendBatchesResponse(
        results=[pb.SendResult(error=pb.Error(code=pb.PRODUCER_FENCED, message="fenced"))])
    with pytest.raises(magnetar.ProducerFenced):
        producer.send(b"x")


def test_payload_errors_raise_in_the_callers_thread(client):
    producer = client.create_producer("t")
    with pytest.raises(TypeError):
        producer.send_async("text is not bytes", lambda r, m: None)
    with pytest.raises(ValueError):
        producer.send(b"x", sequence_id=-1)


def test_client_close_flushes_producers(transport):
    client = magnetar.Client(URL, transport=transport)
    producer = client.create_producer("t", batching_max_publish_delay_ms=60_000)
    sent = []
    producer.send_async(b"late", lambda r, m: sent.append(r))
    client.close()
    assert sent == [magnetar.Result.Ok]
    assert transport.closed and transport.sent("/v1/sessions/close")
    with pytest.raises(magnetar.AlreadyClosed):
        producer.send_async(b"x", lambda r, m: None)
    with pytest.raises(magnetar.AlreadyClosed):
        client.create_producer("t")


def test_a_blocking_call_from_a_callback_raises_instead_of_deadlocking(client):
    producer = client.create_producer("t")
    outcome = []
    finished = threading.Event()

    def callback(result, msg_id):
        try:
            producer.send(b"nested")
        except RuntimeError as exc:
            outcome.append(exc)
        finished.set()

    producer.send_async(b"x", callback)
    assert finished.wait(10)
    assert len(outcome) == 1


def test_receive_and_acknowledge_from_the_users_thread(client, transport):
    delivered = []

    async def fetch(url, req):
        if not delivered:
            delivered.append(1)
            batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"hello")])
            return pb.FetchResponse(entries=[pb.DeliveredEntry(
                entry_id=2, batch=batch.SerializeToString(), num_messages=1)])
        import asyncio
        await asyncio.sleep(0.02)
        return pb.FetchResponse()
    transport.handlers["/v1/consumers/fetch"] = fetch
    consumer = client.subscribe("t", "sub")
    msg = consumer.receive(timeout_millis=5000)
    assert msg.data() == b"hello"
    consumer.acknowledge(msg)
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=50)
    consumer.close()
    [ack] = transport.sent("/v1/consumers/ack")
    assert ack.positions[0].entry_id == 2
    with pytest.raises(magnetar.AlreadyClosed):
        consumer.receive(timeout_millis=10)


def test_close_wakes_a_thread_blocked_in_receive(client):
    consumer = client.subscribe("t", "sub")
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(_catch(consumer.receive)))
    thread.start()
    consumer.close()
    thread.join(10)
    assert not thread.is_alive() and isinstance(outcome[0], magnetar.AlreadyClosed)


def _catch(fn):
    try:
        return fn()
    except Exception as exc:
        return exc


def test_a_transaction_must_have_a_positive_timeout(client):
    for bad in (0, -5, 1.5):
        with pytest.raises(ValueError):
            client.new_transaction(timeout_ms=bad)


def test_service_url_may_list_several_brokers():
    client = magnetar.Client("http://a:1, http://b:2/", transport=FakeTransport())
    try:
        assert client._client.core.urls == ["http://a:1", "http://b:2"]
    finally:
        client.close()
    with pytest.raises(ValueError):
        magnetar.Client(" , ")


def test_every_error_class_of_the_hierarchy_is_exported_by_both_apis():
    """``magnetar`` and ``magnetar.asyncio`` re-export the whole error hierarchy (one
    list, in magnetar/_errors.py): a class added to magnetar_protocol.errors and not
    there fails here."""
    hierarchy = {name for name, value in vars(errors).items()
                 if isinstance(value, type) and issubclass(value, errors.MagnetarError)}
    for module in (magnetar, aio):
        exported = {name for name in module.__all__
                    if isinstance(getattr(module, name), type)
                    and issubclass(getattr(module, name), errors.MagnetarError)}
        assert exported == hierarchy | {"AlreadyClosed", "ProducerQueueIsFull"}
        assert all(getattr(module, name) is getattr(errors, name) for name in hierarchy)
