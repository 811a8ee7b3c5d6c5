"""Pulsar framing: vectors, round trips, and every way a frame can be refused."""

from __future__ import annotations

import random
import struct

import pytest
from google.protobuf.message import EncodeError

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import frames
from magnetar_protocol.pulsar.frames import (
    ChecksumMismatch,
    FrameDecoder,
    FrameError,
    FrameTooLarge,
    GarbageFrame,
    MalformedFrame,
    TruncatedFrame,
    UnknownCommand,
    UnsupportedCommand,
)

Type = pb.BaseCommand.Type
PING_FRAME = bytes.fromhex("00000009" "00000005" "0812" "920100")   # type=PING, ping={}


def crc32c_reference(data: bytes) -> int:
    """Bit-by-bit CRC-32C (Castagnoli, reflected 0x82F63B78): not zlib's CRC-32."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def send_frame(sequence_id: int = 7, payload: bytes = b"hello pulsar") -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1,
                                  properties=[pb.KeyValue(key="a", value="b")])
    return frames.encode(pb.CommandSend(producer_id=3, sequence_id=sequence_id), metadata, payload)


def decode_all(data: bytes, **kwargs) -> list[frames.Frame]:
    decoder = FrameDecoder(**kwargs)
    decoder.feed(data)
    result = list(decoder)
    decoder.finish()
    return result


def test_base_command_fields_are_named_and_numbered_after_their_type():
    for field in pb.BaseCommand.DESCRIPTOR.fields:
        if field.name == "type":
            continue
        assert Type.Name(field.number).lower() == field.name


def test_ping_vector():
    assert frames.encode(pb.CommandPing()) == PING_FRAME
    (frame,) = decode_all(PING_FRAME)
    assert frame.type == Type.PING and frame.metadata is None


def test_checksum_is_crc32c_over_metadata_size_metadata_and_payload():
    data = send_frame()
    total, cmd_size = struct.unpack_from(">II", data)
    magic, checksum = struct.unpack_from(">HI", data, 8 + cmd_size)
    assert magic == 0x0E01 and total == len(data) - 4
    assert checksum == crc32c_reference(data[8 + cmd_size + 6:])
    assert crc32c_reference(b"123456789") == 0xE3069283     # the CRC-32C check value


@pytest.mark.parametrize("sub_command", [
    pb.CommandConnect(client_version="x", protocol_version=21, auth_method_name="token",
                      auth_data=b"jwt"),
    pb.CommandConnected(server_version="magnetar", protocol_version=21, max_message_size=5),
    pb.CommandLookupTopic(topic="persistent://t/n/a", request_id=1, authoritative=True),
    pb.CommandProducer(topic="t", producer_id=1, request_id=2,
                       producer_access_mode=pb.ExclusiveWithFencing, topic_epoch=4),
    pb.CommandSubscribe(topic="t", subscription="s", sub_type=pb.CommandSubscribe.Key_Shared,
                        consumer_id=1, request_id=2,
                        key_shared_meta=pb.KeySharedMeta(key_shared_mode=pb.STICKY,
                                                         hash_ranges=[pb.IntRange(start=0, end=9)])),
    pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[
        pb.MessageIdData(ledger_id=1, entry_id=2, batch_index=3, ack_set=[-2])]),
    pb.CommandError(request_id=9, error=pb.ProducerFenced, message="fenced"),
    pb.CommandEndTxn(request_id=1, txnid_least_bits=2, txnid_most_bits=3, txn_action=pb.ABORT),
    pb.CommandAddSubscriptionToTxn(request_id=1, subscription=[pb.Subscription(topic="t", subscription="s")]),
])
def test_simple_commands_round_trip(sub_command):
    (frame,) = decode_all(frames.encode(sub_command))
    assert frame.body == sub_command
    assert frame.command == frames.command(sub_command)


def test_payload_command_round_trip_keeps_metadata_bytes_as_sent():
    (frame,) = decode_all(send_frame(payload=b"\x00\xff" * 1000))
    assert frame.type == Type.SEND and frame.body.producer_id == 3
    assert frame.payload == b"\x00\xff" * 1000
    assert frame.metadata.properties[0].value == "b"
    assert frame.raw_metadata == frame.metadata.SerializeToString()
    again = frames.encode(frame.command, frame.raw_metadata, frame.payload)
    assert again == send_frame(payload=b"\x00\xff" * 1000)


def test_encoder_refuses_a_command_missing_a_required_field():
    with pytest.raises(EncodeError):
        frames.encode(pb.CommandSend(producer_id=1))


def test_byte_by_byte_and_concatenated_input_yield_the_same_frames():
    stream = send_frame(1) + PING_FRAME + send_frame(2)
    decoder = FrameDecoder()
    seen = []
    for i in range(len(stream)):
        decoder.feed(stream[i:i + 1])
        seen.extend(decoder)
    decoder.finish()
    assert [f.type for f in seen] == [Type.SEND, Type.PING, Type.SEND]
    assert seen == decode_all(stream)


@pytest.mark.parametrize("frame", [PING_FRAME, send_frame()], ids=["simple", "payload"])
def test_truncated_at_every_byte_boundary(frame):
    for cut in range(1, len(frame)):
        decoder = FrameDecoder()
        decoder.feed(frame[:cut])
        assert decoder.next_frame() is None, f"a frame cut at {cut} bytes was returned"
        with pytest.raises(TruncatedFrame, match=f"{cut} bytes into a frame"):
            decoder.finish()
    FrameDecoder().finish()   # nothing buffered: a clean end


def test_every_flipped_checksum_bit_is_refused_and_the_connection_goes_on():
    frame = send_frame()
    cmd_size = struct.unpack_from(">I", frame, 4)[0]
    checksum_at = 8 + cmd_size + 2
    positions = [checksum_at * 8 + bit for bit in range(32)]                # the checksum itself
    positions += [byte * 8 + 3 for byte in range(checksum_at + 4, len(frame))]  # metadata, payload
    for position in positions:
        corrupt = bytearray(frame)
        corrupt[position // 8] ^= 1 << (position % 8)
        decoder = FrameDecoder()
        decoder.feed(bytes(corrupt) + PING_FRAME)
        with pytest.raises(ChecksumMismatch) as caught:
            decoder.next_frame()
        error = caught.value
        assert not error.fatal and error.server_error == pb.ChecksumError
        assert error.command.send.sequence_id == 7, "the listener answers SEND_ERROR for this send"
        assert decoder.next_frame().type == Type.PING


def test_oversize_frame_is_refused_from_its_prefix_alone():
    decoder = FrameDecoder(max_frame_size=64)
    decoder.feed(struct.pack(">I", 61))
    with pytest.raises(FrameTooLarge, match="65 bytes exceeds the limit of 64") as caught:
        decoder.next_frame()
    assert caught.value.fatal
    with pytest.raises(FrameTooLarge):
        decoder.feed(PING_FRAME)    # the stream is out of step: nothing more is read


def test_frame_of_exactly_the_limit_is_accepted():
    frame = send_frame()
    assert len(decode_all(frame, max_frame_size=len(frame))) == 1
    with pytest.raises(FrameTooLarge):
        decode_all(frame, max_frame_size=len(frame) - 1)


def _raw_command(command_bytes: bytes) -> bytes:
    return struct.pack(">II", len(command_bytes) + 4, len(command_bytes)) + command_bytes


def test_unknown_command_type_is_named_and_the_connection_goes_on():
    decoder = FrameDecoder()
    decoder.feed(_raw_command(bytes([0x08, 99])) + PING_FRAME)
    with pytest.raises(UnknownCommand, match="unknown command type 99") as caught:
        decoder.next_frame()
    assert not caught.value.fatal
    assert decoder.next_frame().type == Type.PING


def test_every_defined_command_decodes_with_its_request_id():
    # Every command of the protocol is modelled, served or not, so the listener can
    # answer a refused one with its request id (a client then fails at once).
    for field in pb.BaseCommand.DESCRIPTOR.fields:
        if field.number == 1:
            continue
        body_type = getattr(pb, field.message_type.name)
        body = body_type()
        if "request_id" in body_type.DESCRIPTOR.fields_by_name:
            body.request_id = 4242
        raw = pb.BaseCommand(type=field.number, **{field.name: body}).SerializePartialToString()
        try:
            [frame] = decode_all(_raw_command(raw))
        except frames.MalformedFrame as exc:   # a required field this test left unset
            assert "lacks required fields" in str(exc) and exc.command is not None
            frame_body = getattr(exc.command, field.name)
        except UnsupportedCommand:
            raise AssertionError(f"{Type.Name(field.number)} is not modelled") from None
        else:
            frame_body = frame.body
        if "request_id" in body_type.DESCRIPTOR.fields_by_name:
            assert frame_body.request_id == 4242, Type.Name(field.number)
    assert {f.number for f in pb.BaseCommand.DESCRIPTOR.fields} - {1} == set(Type.values())


@pytest.mark.parametrize("frame, reason", [
    (_raw_command(pb.BaseCommand(type=Type.SEND).SerializeToString()), "lacks its send body"),
    (_raw_command(frames.command(pb.CommandSend(producer_id=1, sequence_id=1))
                  .SerializeToString()), "lacks its metadata and payload"),
    (_raw_command(pb.BaseCommand(type=Type.SEND, send=pb.CommandSend(producer_id=1))
                  .SerializePartialToString()), "lacks required fields: send.sequence_id"),
    (_raw_command(b"\xff\xff\xff"), "not a valid BaseCommand"),
    (_raw_command(b""), "has no type"),
    (PING_FRAME[:4] + struct.pack(">I", 999) + PING_FRAME[8:], "command size 999 exceeds"),
    (struct.pack(">II", 10, 5) + PING_FRAME[8:] + b"!", "1 unexpected bytes after command PING"),
], ids=["no-body", "no-payload", "missing-required", "garbage", "empty", "cmd-size", "trailing"])
def test_malformed_frames_are_refused_with_a_reason(frame, reason):
    decoder = FrameDecoder()
    decoder.feed(frame + PING_FRAME)
    with pytest.raises(MalformedFrame, match=reason) as caught:
        decoder.next_frame()
    assert not caught.value.fatal
    assert decoder.next_frame().type == Type.PING


def test_wrong_magic_is_refused():
    frame = bytearray(send_frame())
    cmd_size = struct.unpack_from(">I", frame, 4)[0]
    frame[8 + cmd_size] = 0x0F
    with pytest.raises(MalformedFrame, match="magic number 0x0f01"):
        decode_all(bytes(frame))


def test_size_prefix_too_small_for_a_command_is_garbage():
    with pytest.raises(GarbageFrame) as caught:
        decode_all(struct.pack(">I", 3) + b"abc")
    assert caught.value.fatal


def test_random_and_mutated_input_only_ever_raises_frame_errors():
    rng = random.Random(17)
    valid = send_frame() + PING_FRAME
    outcomes = {"frame": 0, "refused": 0}
    for _ in range(3000):
        if rng.random() < 0.5:
            data = rng.randbytes(rng.randrange(1, 64))
        else:
            mutated = bytearray(valid)
            for _ in range(rng.randrange(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            data = bytes(mutated)
        decoder = FrameDecoder(max_frame_size=4096)
        decoder.feed(data)
        try:
            while True:
                try:
                    if decoder.next_frame() is None:
                        break
                    outcomes["frame"] += 1
                except FrameError as exc:
                    outcomes["refused"] += 1
                    if exc.fatal:
                        break
            decoder.finish()
        except FrameError:
            outcomes["refused"] += 1
    # Any other exception fails the test; both outcomes must have been exercised.
    assert outcomes["frame"] > 100 and outcomes["refused"] > 1000, outcomes


def test_text_that_is_not_utf8_is_refused_not_passed_on_as_bytes():
    lookup = frames.command(pb.CommandLookupTopic(topic="persistent://t/n/PLACEHOLDER", request_id=1))
    raw = lookup.SerializeToString().replace(b"PLACEHOLDER", b"\xe3\x81\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7")
    with pytest.raises(MalformedFrame, match="lookup.topic is not UTF-8"):
        decode_all(_raw_command(raw))
    metadata = pb.MessageMetadata(producer_name="PLACEHOLDER", sequence_id=1, publish_time=1)
    raw_metadata = metadata.SerializeToString().replace(b"PLACEHOLDER", b"\xff" * 11)
    frame = frames.encode(pb.CommandSend(producer_id=1, sequence_id=1), raw_metadata, b"x")
    with pytest.raises(MalformedFrame, match="metadata's producer_name is not UTF-8"):
        decode_all(frame)
