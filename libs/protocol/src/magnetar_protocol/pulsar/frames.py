"""Pulsar's binary framing: commands to bytes and bytes (as they arrive) to commands.

A simple command is ``[totalSize:u32][cmdSize:u32][BaseCommand]``; a payload command
(SEND, MESSAGE) continues with ``[magic 0x0e01][crc32c:u32][metadataSize:u32]
[MessageMetadata][payload]``, the CRC32C covering everything after itself.  Integers are
big-endian; ``totalSize`` counts the bytes after its own four.

Pure: no sockets.  The listener feeds :class:`FrameDecoder` whatever the socket gave it and
answers each :class:`FrameError` with an ERROR (or SEND_ERROR) frame.  An error whose
``fatal`` is false was confined to one frame whose bounds are known, so the connection can
go on; a fatal one (a size prefix that is absurd or over the limit) leaves no way to find
the next frame, so the decoder refuses everything after it and the listener closes that
connection only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Iterator

import google_crc32c
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError, Message

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import BadRequest

Type = pb.BaseCommand.Type
ServerError = pb.ServerError

MAGIC_CRC32C = 0x0E01
# Pulsar's default maxMessageSize (5 MiB), plus room for the command and metadata around
# the largest payload, as Pulsar sizes its own frame limit.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING

PAYLOAD_COMMANDS = frozenset({Type.SEND, Type.MESSAGE})

_U32 = struct.Struct(">I")
_SIMPLE_HEADER = struct.Struct(">II")       # totalSize, cmdSize
_PAYLOAD_HEADER = struct.Struct(">HII")     # magic, checksum, metadataSize
_MAGIC_AND_CHECKSUM = struct.Struct(">HI")
_SIZE_FIELD = 4

# In pulsar_api.proto every sub-command field of BaseCommand carries its Type's number and
# is named after it, so both directions are a lookup (tests/unit/pulsar/test_frames.py
# checks the naming rule holds for every field).
_FIELD_OF_TYPE: dict[int, str] = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.number != 1}
_TYPE_OF_MESSAGE: dict[str, tuple[int, str]] = {
    f.message_type.full_name: (f.number, f.name)
    for f in pb.BaseCommand.DESCRIPTOR.fields if f.message_type is not None
}


# ---------------------------------------------------------------- errors


class FrameError(BadRequest):
    """A frame the codec refuses.  ``server_error`` is the Pulsar code to answer with;
    ``command`` the frame's command when it parsed (so a SEND can get its SEND_ERROR)."""

    server_error: ClassVar[int] = ServerError.UnknownError
    fatal: ClassVar[bool] = False

    def __init__(self, message: str = "", command: pb.BaseCommand | None = None) -> None:
        super().__init__(message)
        self.command = command

    def __reduce__(self):
        return (self.__class__, (self.message, self.command))


class FrameTooLarge(FrameError):
    """The size prefix announces more than the limit: refused before buffering it."""

    fatal = True
    server_error = ServerError.NotAllowedError


class GarbageFrame(FrameError):
    """The size prefix cannot be a Pulsar frame: the stream is out of step."""

    fatal = True


class TruncatedFrame(FrameError):
    """The connection ended inside a frame."""

    fatal = True


class MalformedFrame(FrameError):
    """The frame's bounds were fine but its content was not a valid command."""


class ChecksumMismatch(FrameError):
    """A payload command's CRC32C does not match its metadata and payload."""

    server_error = ServerError.ChecksumError


class UnknownCommand(FrameError):
    """A command type this protocol version does not define."""


class UnsupportedCommand(FrameError):
    """A defined command type the codec does not model yet."""


# ---------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.  For payload commands ``metadata`` is parsed and
    ``raw_metadata`` kept as sent, so an entry can be stored without re-encoding."""

    command: pb.BaseCommand
    metadata: pb.MessageMetadata | None = None
    raw_metadata: bytes = b""
    payload: bytes = b""

    @property
    def type(self) -> int:
        return self.command.type

    @property
    def body(self) -> Message:
        """The sub-command that ``type`` names (``command.send`` for a SEND...)."""
        return getattr(self.command, _FIELD_OF_TYPE[self.command.type])


def command(sub_command: Message) -> pb.BaseCommand:
    """Wrap a sub-command (``pb.CommandPing()``...) in a BaseCommand of the right type."""
    number, field = _TYPE_OF_MESSAGE[sub_command.DESCRIPTOR.full_name]
    base = pb.BaseCommand(type=number)
    getattr(base, field).CopyFrom(sub_command)
    return base


def encode(cmd: pb.BaseCommand | Message, metadata: pb.MessageMetadata | bytes | None = None,
           payload: bytes = b"") -> bytes:
    """One frame: a simple command, or a payload command when ``metadata`` is given
    (a MessageMetadata, or its bytes as stored).  Raises EncodeError when a required
    field is missing: a Pulsar client would reject the frame anyway."""
    if not isinstance(cmd, pb.BaseCommand):
        cmd = command(cmd)
    cmd_bytes = cmd.SerializeToString()
    if metadata is None:
        return _SIMPLE_HEADER.pack(_SIZE_FIELD + len(cmd_bytes), len(cmd_bytes)) + cmd_bytes
    meta_bytes = metadata if isinstance(metadata, bytes) else metadata.SerializeToString()
    checked = _U32.pack(len(meta_bytes)) + meta_bytes + payload
    checksum = google_crc32c.value(checked)
    total = _SIZE_FIELD + len(cmd_bytes) + 2 + 4 + len(checked)
    return b"".join((_SIMPLE_HEADER.pack(total, len(cmd_bytes)), cmd_bytes,
                     _MAGIC_AND_CHECKSUM.pack(MAGIC_CRC32C, checksum), checked))


def invalid_text_field(message: Message, prefix: str = "") -> str | None:
    """The path of the first string field that is not UTF-8, or None.  Proto2 parsing in
    Python does not check it; such a field then reads as bytes, not str."""
    for descriptor, value in message.ListFields():
        name = prefix + descriptor.name
        values = value if descriptor.is_repeated else (value,)
        if descriptor.type == descriptor.TYPE_STRING:
            if any(isinstance(v, bytes) for v in values):
                return name
        elif descriptor.type == descriptor.TYPE_MESSAGE:
            for item in values:
                if (bad := invalid_text_field(item, name + ".")) is not None:
                    return bad
    return None


def _parse_command(data: bytes | memoryview) -> pb.BaseCommand:
    cmd = pb.BaseCommand()
    try:
        cmd.ParseFromString(data)
    except DecodeError as exc:
        raise MalformedFrame(f"the command is not a valid BaseCommand protobuf ({exc})") from None
    if not cmd.HasField("type"):
        # An enum value this proto does not know lands in the unknown fields.
        raw = [f.data for f in unknown_fields.UnknownFieldSet(cmd) if f.field_number == 1]
        if raw:
            raise UnknownCommand(f"unknown command type {raw[-1]}")
        raise MalformedFrame("the command has no type")
    field = _FIELD_OF_TYPE.get(cmd.type)
    if field is None:
        raise UnsupportedCommand(f"command {Type.Name(cmd.type)} is not supported", cmd)
    if not cmd.HasField(field):
        raise MalformedFrame(f"command {Type.Name(cmd.type)} lacks its {field} body", cmd)
    if not cmd.IsInitialized():
        missing = ", ".join(cmd.FindInitializationErrors())
        raise MalformedFrame(f"command {Type.Name(cmd.type)} lacks required fields: {missing}", cmd)
    if (bad := invalid_text_field(cmd)) is not None:
        raise MalformedFrame(f"command {Type.Name(cmd.type)}: {bad} is not UTF-8 text", cmd)
    return cmd


def decode_frame(frame: bytes | memoryview) -> Frame:
    """Decode one whole frame (size prefix included), as the decoder does."""
    view = memoryview(frame)
    if len(view) < _SIMPLE_HEADER.size:
        raise TruncatedFrame(f"a frame needs at least {_SIMPLE_HEADER.size} bytes, got {len(view)}")
    total, cmd_size = _SIMPLE_HEADER.unpack_from(view)
    if total + _SIZE_FIELD != len(view):
        raise MalformedFrame(f"the size prefix says {total + _SIZE_FIELD} bytes, the frame has {len(view)}")
    if cmd_size > total - _SIZE_FIELD:
        raise MalformedFrame(f"command size {cmd_size} exceeds the frame's {total - _SIZE_FIELD} bytes")
    cmd_end = _SIMPLE_HEADER.size + cmd_size
    cmd = _parse_command(view[_SIMPLE_HEADER.size:cmd_end])
    rest = view[cmd_end:]
    if cmd.type not in PAYLOAD_COMMANDS:
        if rest:
            raise MalformedFrame(f"{len(rest)} unexpected bytes after command {Type.Name(cmd.type)}", cmd)
        return Frame(cmd)
    if len(rest) < _PAYLOAD_HEADER.size:
        raise MalformedFrame(f"command {Type.Name(cmd.type)} lacks its metadata and payload", cmd)
    magic, checksum, meta_size = _PAYLOAD_HEADER.unpack_from(rest)
    if magic != MAGIC_CRC32C:
        raise MalformedFrame(f"magic number 0x{magic:04x} is not 0x{MAGIC_CRC32C:04x}", cmd)
    checked = rest[6:]
    actual = google_crc32c.value(checked.tobytes())
    if actual != checksum:
        raise ChecksumMismatch(f"checksum 0x{checksum:08x} does not match 0x{actual:08x}", cmd)
    if meta_size > len(checked) - 4:
        raise MalformedFrame(f"metadata size {meta_size} exceeds the frame", cmd)
    raw_metadata = bytes(checked[4:4 + meta_size])
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(raw_metadata)
    except DecodeError as exc:
        raise MalformedFrame(f"the message metadata is not valid ({exc})", cmd) from None
    if not metadata.IsInitialized():
        missing = ", ".join(metadata.FindInitializationErrors())
        raise MalformedFrame(f"the message metadata lacks required fields: {missing}", cmd)
    if (bad := invalid_text_field(metadata)) is not None:
        raise MalformedFrame(f"the message metadata's {bad} is not UTF-8 text", cmd)
    return Frame(cmd, metadata, raw_metadata, bytes(checked[4 + meta_size:]))


class FrameDecoder:
    """Incremental decoder for one connection: ``feed`` bytes as they arrive, then take
    frames with ``next_frame`` (None: need more bytes) or by iterating.  A frame's size is
    checked against ``max_frame_size`` (the whole frame, size prefix included) as soon as
    its prefix arrives, so an oversize frame is never buffered."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < _SIMPLE_HEADER.size:
            raise ValueError(f"max_frame_size must be at least {_SIMPLE_HEADER.size}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._start = 0
        self._failed: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a returned frame."""
        return len(self._buffer) - self._start

    def feed(self, data: bytes) -> None:
        if self._failed is not None:
            raise self._failed
        if self._start and self._start * 2 >= len(self._buffer):
            del self._buffer[:self._start]
            self._start = 0
        self._buffer += data

    def next_frame(self) -> Frame | None:
        if self._failed is not None:
            raise self._failed
        available = len(self._buffer) - self._start
        if available < _SIZE_FIELD:
            return None
        (total,) = _U32.unpack_from(self._buffer, self._start)
        if total + _SIZE_FIELD > self.max_frame_size:
            self._failed = FrameTooLarge(
                f"frame of {total + _SIZE_FIELD} bytes exceeds the limit of {self.max_frame_size}")
            raise self._failed
        if total < _SIZE_FIELD:
            self._failed = GarbageFrame(f"frame size {total} is too small to hold a command size")
            raise self._failed
        if available < total + _SIZE_FIELD:
            return None
        end = self._start + _SIZE_FIELD + total
        # A copy, so no view pins the buffer (a pinned bytearray cannot be trimmed).
        frame = bytes(self._buffer[self._start:end])
        self._start = end          # consumed even if it fails: the next frame starts here
        return decode_frame(frame)

    def __iter__(self) -> Iterator[Frame]:
        while (frame := self.next_frame()) is not None:
            yield frame

    def finish(self) -> None:
        """At end of stream: raise TruncatedFrame if part of a frame is still buffered."""
        if self._failed is None and self.buffered:
            raise TruncatedFrame(f"the connection ended {self.buffered} bytes into a frame")
