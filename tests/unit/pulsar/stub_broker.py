"""A test fixture, not product code: the smallest Pulsar "broker" that lets the real
`pulsar-client` wheel connect, produce and consume, built on magnetar_protocol.pulsar.frames.

It runs its own asyncio loop in a thread (the wheel's calls block), answers discovery
with itself, keeps every SEND and ACK it receives, and pushes the MESSAGE frames a test
queued for a subscription once the consumer grants permits.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import frames

Type = pb.BaseCommand.Type
SERVER_PROTOCOL_VERSION = 21


@dataclass
class QueuedEntry:
    metadata: pb.MessageMetadata | bytes     # bytes: an entry stored as it came
    payload: bytes
    entry_id: int


@dataclass
class Recorded:
    frames: list[frames.Frame] = field(default_factory=list)
    sends: list[frames.Frame] = field(default_factory=list)
    acks: list[pb.CommandAck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class StubBroker:
    def __init__(self) -> None:
        self.recorded = Recorded()
        self._condition = threading.Condition()
        self._queued: dict[str, list[QueuedEntry]] = {}   # subscription -> entries to push
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._next_entry = 0
        self.url = ""

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> StubBroker:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        port = started.result(timeout=10)
        self.url = f"pulsar://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    # ------------------------------------------------------------ what tests use

    def queue(self, subscription: str, metadata: pb.MessageMetadata | bytes, payload: bytes) -> int:
        """Deliver this entry to the subscription's consumer once it asks for messages."""
        with self._condition:
            self._next_entry += 1
            self._queued.setdefault(subscription, []).append(
                QueuedEntry(metadata, payload, self._next_entry))
            return self._next_entry

    def wait_for(self, predicate, what: str, timeout: float = 15.0):
        """Wait until ``predicate(recorded)`` is truthy; fail naming ``what`` if it is not."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while not (result := predicate(self.recorded)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"within {timeout}s the stub broker did not see {what}; "
                        f"frames seen: {[Type.Name(f.type) for f in self.recorded.frames]}; "
                        f"errors: {self.recorded.errors}")
                self._condition.wait(remaining)
            return result

    # ------------------------------------------------------------ the connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = frames.FrameDecoder()
        consumers: dict[int, str] = {}       # consumer id -> subscription
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                while True:
                    try:
                        frame = decoder.next_frame()
                    except frames.FrameError as exc:
                        self._record_error(f"{type(exc).__name__}: {exc}")
                        writer.write(frames.encode(pb.CommandError(
                            request_id=0, error=exc.server_error, message=str(exc))))
                        if exc.fatal:
                            return
                        continue
                    if frame is None:
                        break
                    self._record(frame)
                    for reply in self._answer(frame, consumers):
                        writer.write(reply)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _record(self, frame: frames.Frame) -> None:
        with self._condition:
            self.recorded.frames.append(frame)
            if frame.type == Type.SEND:
                self.recorded.sends.append(frame)
            elif frame.type == Type.ACK:
                self.recorded.acks.append(frame.command.ack)
            self._condition.notify_all()

    def _record_error(self, text: str) -> None:
        with self._condition:
            self.recorded.errors.append(text)
            self._condition.notify_all()

    def _answer(self, frame: frames.Frame, consumers: dict[int, str]) -> list[bytes]:
        body = frame.body
        match frame.type:
            case Type.CONNECT:
                return [frames.encode(pb.CommandConnected(
                    server_version="magnetar-stub",
                    protocol_version=min(body.protocol_version, SERVER_PROTOCOL_VERSION),
                    max_message_size=frames.DEFAULT_MAX_MESSAGE_SIZE))]
            case Type.PING:
                return [frames.encode(pb.CommandPong())]
            case Type.PARTITIONED_METADATA:
                return [frames.encode(pb.CommandPartitionedTopicMetadataResponse(
                    request_id=body.request_id, partitions=0,
                    response=pb.CommandPartitionedTopicMetadataResponse.Success))]
            case Type.LOOKUP:
                return [frames.encode(pb.CommandLookupTopicResponse(
                    request_id=body.request_id, broker_service_url=self.url,
                    response=pb.CommandLookupTopicResponse.Connect, authoritative=True))]
            case Type.PRODUCER:
                return [frames.encode(pb.CommandProducerSuccess(
                    request_id=body.request_id,
                    producer_name=body.producer_name or f"stub-producer-{body.producer_id}",
                    last_sequence_id=-1))]
            case Type.SEND:
                with self._condition:
                    self._next_entry += 1
                    entry_id = self._next_entry
                return [frames.encode(pb.CommandSendReceipt(
                    producer_id=body.producer_id, sequence_id=body.sequence_id,
                    highest_sequence_id=body.highest_sequence_id,
                    message_id=pb.MessageIdData(ledger_id=1, entry_id=entry_id)))]
            case Type.SUBSCRIBE:
                consumers[body.consumer_id] = body.subscription
                return [frames.encode(pb.CommandSuccess(request_id=body.request_id))]
            case Type.FLOW:
                with self._condition:
                    entries = self._queued.pop(consumers.get(body.consumer_id, ""), [])
                return [frames.encode(
                    pb.CommandMessage(consumer_id=body.consumer_id, message_id=pb.MessageIdData(
                        ledger_id=1, entry_id=entry.entry_id)),
                    entry.metadata, entry.payload) for entry in entries]
            case Type.ACK:
                if body.HasField("request_id"):
                    return [frames.encode(pb.CommandAckResponse(
                        consumer_id=body.consumer_id, request_id=body.request_id))]
                return []
            case Type.CLOSE_PRODUCER | Type.CLOSE_CONSUMER:
                return [frames.encode(pb.CommandSuccess(request_id=body.request_id))]
            case Type.PONG:
                return []
        request_id = getattr(body, "request_id", 0)
        self._record_error(f"unanswered {Type.Name(frame.type)}")
        return [frames.encode(pb.CommandError(
            request_id=request_id, error=pb.NotAllowedError,
            message=f"the stub broker does not answer {Type.Name(frame.type)}"))]
