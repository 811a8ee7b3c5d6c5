"""Pulsar's payload compression, both ways, through one library (cramjam).  Pure: bytes
in, bytes out, no I/O.

What Pulsar clients put on the wire (checked against the `pulsar-client` wheel in
tests/unit/pulsar/test_real_client.py):

- LZ4: a raw LZ4 *block* (no frame header, no stored size); the size before compression
  is only in ``MessageMetadata.uncompressed_size``.
- ZLIB: a zlib stream (RFC 1950: header, deflate, Adler-32).
- ZSTD: a zstd frame.
- SNAPPY: a raw snappy block (not snappy's framing format).

Decompression writes into a buffer of exactly ``uncompressed_size`` bytes, which must be
within ``max_size``: a forged size or a decompression bomb fails with
:class:`CompressionError` instead of allocating what the sender asks for.
"""

from __future__ import annotations

import cramjam

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.pulsar.frames import DEFAULT_MAX_MESSAGE_SIZE

CompressionType = pb.CompressionType


class CompressionError(BadRequest):
    """A payload that does not decompress to what its metadata says."""


_COMPRESS = {
    CompressionType.LZ4: lambda data: cramjam.lz4.compress_block(data, store_size=False),
    CompressionType.ZLIB: cramjam.zlib.compress,
    CompressionType.ZSTD: cramjam.zstd.compress,
    CompressionType.SNAPPY: cramjam.snappy.compress_raw,
}
_DECOMPRESS_INTO = {
    CompressionType.LZ4: cramjam.lz4.decompress_block_into,
    CompressionType.ZLIB: cramjam.zlib.decompress_into,
    CompressionType.ZSTD: cramjam.zstd.decompress_into,
    CompressionType.SNAPPY: cramjam.snappy.decompress_raw_into,
}


def _check_type(compression: int) -> None:
    if compression != CompressionType.NONE and compression not in _COMPRESS:
        raise CompressionError(f"unknown compression type {compression}")


def compress(compression: int, data: bytes) -> bytes:
    """``data`` compressed as a Pulsar client would; the caller records ``len(data)`` in
    ``uncompressed_size``."""
    _check_type(compression)
    if compression == CompressionType.NONE:
        return data
    return bytes(_COMPRESS[compression](data))


def decompress(compression: int, data: bytes, uncompressed_size: int,
               max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes:
    _check_type(compression)
    if compression == CompressionType.NONE:
        return data
    name = CompressionType.Name(compression)
    if uncompressed_size > max_size:
        raise CompressionError(
            f"{name} payload claims {uncompressed_size} bytes uncompressed, over the limit of {max_size}")
    output = bytearray(uncompressed_size)
    try:
        written = _DECOMPRESS_INTO[compression](data, output)
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"{name} payload does not decompress to {uncompressed_size} bytes: {exc}") from None
    if written != uncompressed_size:
        raise CompressionError(f"{name} payload decompressed to {written} bytes, metadata says {uncompressed_size}")
    return bytes(output)
