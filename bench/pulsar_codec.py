"""Where to translate a Pulsar producer's entry into Magnetar's format: on write, or on read.

A Pulsar SEND carries one entry: MessageMetadata plus a (possibly compressed) payload of
1,000 x 100 B messages here.  Two ways to store it:

  translate on write   unpack it into a MessageBatch once; Magnetar readers get the stored
                       bytes as they are, Pulsar readers get it re-encoded as a Pulsar entry
  store as is          keep metadata + payload with a format tag; Pulsar readers get it as
                       it came, Magnetar readers get it translated on every read

The cost per message written is the write cost plus, per subscription (1 and 3), the read
cost for that subscription's protocol.  The floor every path pays at least once per read
is framing the stored bytes into a MESSAGE frame (CRC32C included): each figure is also
printed as a multiple of that floor, measured in the same run.  CPU only (no database):

    .venv/bin/python bench/pulsar_codec.py [--messages 1000] [--size 100] [--repeat 100]
"""

from __future__ import annotations

import argparse
import time

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches, frames

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]
FORMAT_PULSAR = b"\x01"     # the tag a stored-as-is entry would carry


def sample_batch(messages: int, size: int) -> mpb.MessageBatch:
    """Messages shaped like application events: JSON-ish text (compressible as real data
    is), two properties, a key and an event time each."""
    out = []
    for i in range(messages):
        text = f'{{"id":{i},"user":"user-{i % 97}","amount":{i * 7 % 1000},"note":"'
        payload = (text + "x" * size)[: size - 2].encode() + b'"}'
        out.append(mpb.SingleMessage(payload=payload, partition_key=f"user-{i % 97}",
                                     properties={"source": "bench", "n": str(i)},
                                     sequence_id=i, event_time=1_700_000_000_000 + i))
    return mpb.MessageBatch(messages=out)


def per_message_us(fn, messages: int, repeat: int) -> float:
    """Best of ``repeat`` runs (the least disturbed by other work on a shared machine)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best / messages * 1e6


def measure(codec: int, batch: mpb.MessageBatch, repeat: int) -> dict:
    n = len(batch.messages)
    metadata, payload = batches.to_pulsar_entry(batch, producer_name="bench", publish_time=1,
                                                compression=codec, batched=True)
    raw_metadata = metadata.SerializeToString()
    message_cmd = pb.CommandMessage(consumer_id=1, message_id=pb.MessageIdData(ledger_id=0, entry_id=1))
    send_frame = frames.encode(pb.CommandSend(producer_id=1, sequence_id=0, num_messages=n),
                               metadata, payload)
    translated = batches.to_message_batch(metadata, payload).SerializeToString()
    stored_as_is = FORMAT_PULSAR + len(raw_metadata).to_bytes(4, "big") + raw_metadata + payload

    def decode_send():
        decoder = frames.FrameDecoder()
        decoder.feed(send_frame)
        decoder.next_frame()

    def write_translate():
        batches.to_message_batch(metadata, payload).SerializeToString()

    def write_as_is():
        FORMAT_PULSAR + len(raw_metadata).to_bytes(4, "big") + raw_metadata + payload

    def read_floor():               # stored Pulsar entry -> MESSAGE frame for a Pulsar reader
        frames.encode(message_cmd, raw_metadata, payload)

    def read_pulsar_from_translated():   # stored MessageBatch -> MESSAGE frame, same codec
        stored = mpb.MessageBatch()
        stored.ParseFromString(translated)
        meta, data = batches.to_pulsar_entry(stored, producer_name="bench", publish_time=1,
                                             compression=codec, batched=True)
        frames.encode(message_cmd, meta, data)

    def read_magnetar_from_as_is():     # stored Pulsar entry -> MessageBatch bytes
        size = int.from_bytes(stored_as_is[1:5], "big")
        meta = pb.MessageMetadata()
        meta.ParseFromString(stored_as_is[5:5 + size])
        batches.to_message_batch(meta, stored_as_is[5 + size:]).SerializeToString()

    us = {name: per_message_us(fn, n, repeat) for name, fn in [
        ("decode_send", decode_send), ("write_translate", write_translate),
        ("write_as_is", write_as_is), ("read_floor", read_floor),
        ("read_pulsar_from_translated", read_pulsar_from_translated),
        ("read_magnetar_from_as_is", read_magnetar_from_as_is)]}
    us["stored_bytes_translated"] = len(translated) / n
    us["stored_bytes_as_is"] = len(stored_as_is) / n
    return us


def scenarios(us: dict) -> list[tuple[str, int, float, float]]:
    """(readers' protocol, subscriptions, translate-on-write µs, store-as-is µs) per message."""
    rows = []
    for readers in ("pulsar", "magnetar"):
        for subs in (1, 3):
            if readers == "pulsar":
                on_write = us["write_translate"] + subs * us["read_pulsar_from_translated"]
                as_is = us["write_as_is"] + subs * us["read_floor"]
            else:
                on_write = us["write_translate"]          # Magnetar readers take the bytes as stored
                as_is = us["write_as_is"] + subs * us["read_magnetar_from_as_is"]
            rows.append((readers, subs, on_write, as_is))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()
    batch = sample_batch(args.messages, args.size)
    print(f"Pulsar entry of {args.messages} x {args.size} B messages; µs per message, "
          f"best of {args.repeat}; floor = framing a stored entry as a MESSAGE (CRC32C included)")
    for codec in CODECS:
        name = pb.CompressionType.Name(codec)
        us = measure(codec, batch, args.repeat)
        floor = us["read_floor"]
        print(f"\n== {name}: stored bytes/message: translated {us['stored_bytes_translated']:.1f}, "
              f"as is {us['stored_bytes_as_is']:.1f}")
        for key in ("decode_send", "write_translate", "write_as_is", "read_floor",
                    "read_pulsar_from_translated", "read_magnetar_from_as_is"):
            print(f"  {key:30s} {us[key]:8.3f} µs   {us[key] / floor:7.1f} x floor")
        print(f"  {'readers':9s} {'subs':>4s} {'translate on write':>19s} {'store as is':>12s} "
              f"{'as is / on write':>17s}")
        for readers, subs, on_write, as_is in scenarios(us):
            print(f"  {readers:9s} {subs:4d} {on_write:16.3f} µs {as_is:9.3f} µs {as_is / on_write:17.2f}")


if __name__ == "__main__":
    main()
