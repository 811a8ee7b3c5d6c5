"""Pulsar's four codecs both ways, and refusal of payloads that lie about their size."""

from __future__ import annotations

import cramjam
import pytest

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar.compression import CompressionError, compress, decompress

CODECS = [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
SAMPLES = [b"", b"x", bytes(range(256)) * 40, b"pulsar " * 100_000]


@pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
def test_round_trip(codec):
    for data in SAMPLES:
        packed = compress(codec, data)
        assert decompress(codec, packed, len(data)) == data
    assert len(compress(codec, SAMPLES[-1])) < len(SAMPLES[-1]) // 10


def test_none_passes_through():
    assert compress(pb.NONE, b"abc") == b"abc"
    assert decompress(pb.NONE, b"abc", 0) == b"abc"


def test_lz4_is_a_raw_block_and_snappy_raw_as_pulsar_sends_them():
    data = b"abcabcabc" * 50
    assert compress(pb.LZ4, data) == bytes(cramjam.lz4.compress_block(data, store_size=False))
    assert not compress(pb.LZ4, data).startswith(bytes.fromhex("04224d18"))   # no LZ4 frame magic
    assert compress(pb.SNAPPY, data) == bytes(cramjam.snappy.compress_raw(data))
    assert compress(pb.ZLIB, data)[0] == 0x78                                    # zlib header


@pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
def test_a_size_that_lies_is_refused(codec):
    data = b"magnetar " * 1000
    packed = compress(codec, data)
    for wrong in (len(data) - 1, len(data) + 1, 0):
        with pytest.raises(CompressionError, match=pb.CompressionType.Name(codec)):
            decompress(codec, packed, wrong)


@pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
def test_a_bomb_is_refused_without_inflating_it(codec):
    bomb = compress(codec, bytes(50_000_000))
    with pytest.raises(CompressionError, match="over the limit of 5242880"):
        decompress(codec, bomb, 50_000_000)
    with pytest.raises(CompressionError):
        decompress(codec, bomb, 1000)       # a small claim: writes stop at 1000 bytes


@pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
def test_garbage_is_refused(codec):
    with pytest.raises(CompressionError):
        decompress(codec, b"\x00\xffnot compressed at all\x17" * 3, 500)


def test_unknown_codec_is_refused():
    with pytest.raises(CompressionError, match="unknown compression type 9"):
        decompress(9, b"x", 1)
    with pytest.raises(CompressionError, match="unknown compression type 9"):
        compress(9, b"x")
