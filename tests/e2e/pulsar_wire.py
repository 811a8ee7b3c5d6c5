"""A small frame-level Pulsar client for tests: no Python Pulsar client has transactions,
so this one speaks the commands a Java client sends for them (TC_CLIENT_CONNECT, NEW_TXN,
ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN, SEND and ACK with a txn id), one
blocking socket per broker, one request at a time.  Pushed MESSAGE frames are kept until
``receive`` takes them."""

from __future__ import annotations

import itertools
import socket
import struct
import time
from collections import deque

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches, frames, ids

Type = pb.BaseCommand.Type
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign"
TIMEOUT_S = 30.0


class WireError(Exception):
    """An answer carrying a ServerError: ``code`` is its number, ``name`` its name."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{pb.ServerError.Name(code)}: {message}")
        self.code = code
        self.name = pb.ServerError.Name(code)


class Wire:
    """One connection (CONNECTed, with a token when given)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        host, port = url.removeprefix("pulsar://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.url = url
        self.token = token
        self.ids = itertools.count(1)
        self.pushed: deque = deque()   # MESSAGE frames, in arrival order
        self.inboxes: dict[int, deque] = {}   # consumer id -> (id, payload) unpacked
        self.others: list = []         # any other unasked frame (REACHED_END_OF_TOPIC...)
        connect = pb.CommandConnect(client_version="pulsar-wire-test", protocol_version=21)
        if token:
            connect.auth_method_name, connect.auth_data = "token", token.encode()
        self.sock.sendall(frames.encode(connect))
        reply = self._read()
        if reply.type != Type.CONNECTED:
            raise WireError(reply.body.error, reply.body.message)

    def close(self) -> None:
        self.sock.close()

    # ---------------------------------------------------------------- frames

    def _read_exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def _read(self) -> frames.Frame:
        size = struct.unpack(">I", self._read_exactly(4))[0]
        return frames.decode_frame(struct.pack(">I", size) + self._read_exactly(size))

    def send(self, cmd, metadata=None, payload: bytes = b"") -> None:
        self.sock.sendall(frames.encode(cmd, metadata, payload))

    def send_raw(self, command: pb.BaseCommand) -> None:
        """A simple command as given, required fields missing or not (what a faulty
        client sends)."""
        data = command.SerializePartialToString()
        self.sock.sendall(struct.pack(">II", len(data) + 4, len(data)) + data)

    def wait_for(self, match) -> frames.Frame:
        """Read until a frame ``match(frame)`` accepts; keep MESSAGEs and others."""
        while True:
            frame = self._read()
            if match(frame):
                return frame
            if frame.type == Type.MESSAGE:
                self.pushed.append(frame)
            elif frame.type == Type.PING:
                self.send(pb.CommandPong())
            else:
                self.others.append(frame)

    def request(self, cmd, reply_type: int):
        """Send ``cmd`` (its request_id set here) and return its answer's body; an answer
        with an error, or an ERROR for it, raises WireError."""
        cmd.request_id = next(self.ids)
        self.send(cmd)
        frame = self.wait_for(lambda f: f.type in (reply_type, Type.ERROR)
                              and getattr(f.body, "request_id", None) == cmd.request_id)
        body = frame.body
        if frame.type == Type.ERROR or ("error" in body.DESCRIPTOR.fields_by_name and body.HasField("error")):
            raise WireError(body.error, body.message)
        return body

    # ---------------------------------------------------------------- discovery

    def lookup(self, topic: str) -> str:
        found = self.request(pb.CommandLookupTopic(topic=topic), Type.LOOKUP_RESPONSE)
        if found.response == pb.CommandLookupTopicResponse.Failed:
            raise WireError(found.error, found.message)
        return found.broker_service_url

    def partitions(self, topic: str) -> int:
        reply = self.request(pb.CommandPartitionedTopicMetadata(topic=topic), Type.PARTITIONED_METADATA_RESPONSE)
        return reply.partitions

    # ---------------------------------------------------------------- produce and consume

    def _owned_here(self, topic: str) -> None:
        """LOOKUP first, as every client does (it assigns the topic to a broker)."""
        if (url := self.lookup(topic)) != self.url:
            raise AssertionError(f"{topic} is served by {url}; connect there")

    def producer(self, topic: str, producer_id: int, name: str = "") -> str:
        self._owned_here(topic)
        cmd = pb.CommandProducer(topic=topic, producer_id=producer_id, txn_enabled=True)
        if name:
            cmd.producer_name = name
        return self.request(cmd, Type.PRODUCER_SUCCESS).producer_name

    def publish(self, producer_id: int, name: str, sequence_id: int, payload: bytes,
                txn: tuple[int, int] | None = None) -> pb.CommandSendReceipt:
        """One message; the SEND_RECEIPT, or WireError from its SEND_ERROR."""
        send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id, num_messages=1)
        if txn is not None:
            send.txnid_most_bits, send.txnid_least_bits = txn
        metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id,
                                      publish_time=int(time.time() * 1000))
        self.send(send, metadata, payload)
        frame = self.wait_for(lambda f: f.type in (Type.SEND_RECEIPT, Type.SEND_ERROR)
                              and f.body.producer_id == producer_id and f.body.sequence_id == sequence_id)
        if frame.type == Type.SEND_ERROR:
            raise WireError(frame.body.error, frame.body.message)
        return frame.body

    def subscribe(self, topic: str, subscription: str, consumer_id: int, permits: int = 1000,
                  sub_type: int = pb.CommandSubscribe.Shared) -> None:
        self._owned_here(topic)
        self.request(pb.CommandSubscribe(topic=topic, subscription=subscription, consumer_id=consumer_id,
                                         sub_type=sub_type,
                                         initial_position=pb.CommandSubscribe.Earliest), Type.SUCCESS)
        self.send(pb.CommandFlow(consumer_id=consumer_id, message_permits=permits))

    def receive(self, consumer_id: int) -> tuple[pb.MessageIdData, bytes]:
        """The next pushed message of the consumer: (its id, its payload); a batch's
        messages one by one (those its ``ack_set`` marks as due)."""
        mid, payload, _ = self.receive_counted(consumer_id)
        return mid, payload

    def receive_counted(self, consumer_id: int) -> tuple[pb.MessageIdData, bytes, int]:
        """``receive``, with the MESSAGE's redelivery count."""
        while True:
            inbox = self.inboxes.setdefault(consumer_id, deque())
            if inbox:
                return inbox.popleft()
            frame = next((f for f in self.pushed if f.body.consumer_id == consumer_id), None)
            if frame is None:
                frame = self.wait_for(lambda f: f.type == Type.MESSAGE and f.body.consumer_id == consumer_id)
            else:
                self.pushed.remove(frame)
            messages = batches.unpack_entry(frame.metadata, frame.payload)
            due = ids.words_to_indices(list(frame.body.ack_set), len(messages)) if frame.body.ack_set \
                else range(len(messages))
            for index in due:
                mid = pb.MessageIdData()
                mid.CopyFrom(frame.body.message_id)
                if frame.metadata.HasField("num_messages_in_batch"):
                    mid.batch_index, mid.batch_size = index, len(messages)
                inbox.append((mid, messages[index].payload, frame.body.redelivery_count))

    def ack(self, consumer_id: int, message_id: pb.MessageIdData, txn: tuple[int, int] | None = None,
            cumulative: bool = False) -> None:
        cmd = pb.CommandAck(consumer_id=consumer_id,
                            ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual)
        cmd.message_id.add().CopyFrom(message_id)
        if txn is not None:
            cmd.txnid_most_bits, cmd.txnid_least_bits = txn
        self.request(cmd, Type.ACK_RESPONSE)

    # ---------------------------------------------------------------- transactions

    def tc_connect(self, tc_id: int) -> None:
        self.request(pb.CommandTcClientConnectRequest(tc_id=tc_id), Type.TC_CLIENT_CONNECT_RESPONSE)

    def new_txn(self, tc_id: int = 0, ttl_s: int = 60) -> tuple[int, int]:
        reply = self.request(pb.CommandNewTxn(tc_id=tc_id, txn_ttl_seconds=ttl_s), Type.NEW_TXN_RESPONSE)
        return reply.txnid_most_bits, reply.txnid_least_bits

    def add_partitions(self, txn: tuple[int, int], *partitions: str) -> None:
        self.request(pb.CommandAddPartitionToTxn(txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                                                 partitions=list(partitions)), Type.ADD_PARTITION_TO_TXN_RESPONSE)

    def add_subscription(self, txn: tuple[int, int], topic: str, subscription: str) -> None:
        self.request(pb.CommandAddSubscriptionToTxn(
            txnid_most_bits=txn[0], txnid_least_bits=txn[1],
            subscription=[pb.Subscription(topic=topic, subscription=subscription)]),
            Type.ADD_SUBSCRIPTION_TO_TXN_RESPONSE)

    def end_txn(self, txn: tuple[int, int], commit: bool) -> None:
        self.request(pb.CommandEndTxn(txnid_most_bits=txn[0], txnid_least_bits=txn[1],
                                      txn_action=pb.COMMIT if commit else pb.ABORT), Type.END_TXN_RESPONSE)


def coordinators(wire: Wire) -> dict[int, Wire]:
    """What a Pulsar client does at start with transactions on: one partition of the
    assignment topic per coordinator, looked up and TC_CLIENT_CONNECTed (TCID = partition)."""
    out = {}
    for tc_id in range(wire.partitions(TC_ASSIGN)):
        url = wire.lookup(f"{TC_ASSIGN}-partition-{tc_id}")
        conn = Wire(url, wire.token)
        conn.tc_connect(tc_id)
        out[tc_id] = conn
    return out
