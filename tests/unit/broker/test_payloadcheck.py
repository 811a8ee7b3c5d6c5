"""The JSON payload check (partition/payloadcheck.py): its compiled yes/no agrees with
the rules' walk of the definition on every value, recursive records included, and a
refusal still says why; a Pulsar entry stored as sent is opened to be checked."""

from __future__ import annotations

import json

import pytest

from magnetar_broker.partition import payloadcheck
from magnetar_broker.partition.batchcheck import schema_problem
from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches, stored
from magnetar_protocol.schemainfo import Schema

NODE = {"type": "record", "name": "Node", "namespace": "t", "fields": [
    {"name": "id", "type": "long"},
    {"name": "label", "type": ["null", "string"]},
    {"name": "weight", "type": "double", "default": 1.0},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": ["int", "boolean"]}},
    {"name": "next", "type": ["null", "t.Node"]},
    {"name": "raw", "type": {"type": "fixed", "name": "Raw", "size": 2}},
]}
GOOD = {"id": 1, "label": None, "color": "RED", "tags": ["a"], "attrs": {"x": 1, "y": True},
        "next": {"id": 2, "label": "b", "color": 1, "tags": [], "attrs": {}, "next": None, "raw": "zz"},
        "raw": "ab"}
BAD = [
    {k: v for k, v in GOOD.items() if k != "id"},          # a required field missing
    GOOD | {"id": "1"},                                     # a string for a long
    GOOD | {"id": True},                                    # a bool is no number
    GOOD | {"id": 2**63},                                   # past a long
    GOOD | {"color": "BLUE"},                               # not a symbol
    GOOD | {"tags": ["a", 2]},                              # an array item of the wrong type
    GOOD | {"attrs": {"x": "no"}},                          # a map value in no branch of its union
    GOOD | {"next": {"id": "deep"}},                        # deep in the recursive record
    GOOD | {"next": GOOD | {"next": GOOD | {"color": None}}},
    GOOD | {"raw": 7},
    [GOOD],
    None,
]


def test_the_compiled_check_agrees_with_the_walk():
    names = payloadcheck._named(NODE)
    fits = payloadcheck._compile(NODE, names, {})
    for value in [GOOD, GOOD | {"extra": [1]}, GOOD | {"weight": 2}] + BAD:
        walked = payloadcheck._fits(value, NODE, names, "") is None
        assert fits(value) == walked, value


@pytest.mark.parametrize("value, why", [
    (BAD[0], "field 'id' is missing"),
    (BAD[1], "id is str, not long"),
    (BAD[7], "next"),
])
def test_a_refused_json_payload_says_why(value, why):
    check = payloadcheck.payload_check(Schema("JSON", json.dumps(NODE).encode()))
    assert check(json.dumps(GOOD).encode()) is None
    problem = check(json.dumps(value).encode())
    assert problem is not None and why in problem
    assert "not JSON" in check(b"{")


def test_pulsar_entries_stored_as_sent_are_opened_to_check_their_payloads():
    """A Pulsar entry is stored as sent (an envelope, here a compressed batch): its
    messages are checked once opened; an encrypted one cannot be, and passes."""
    check = payloadcheck.payload_check(Schema("JSON", json.dumps(NODE).encode()))
    good = json.dumps(GOOD).encode()

    def envelope(*payloads: bytes, **extra) -> bytes:
        batch = mpb.MessageBatch(messages=[mpb.SingleMessage(payload=p, sequence_id=i, schema_version=0)
                                           for i, p in enumerate(payloads)])
        metadata, payload = batches.to_pulsar_entry(batch, producer_name="p", publish_time=1, batched=True,
                                                    compression=pb.ZLIB)
        metadata.MergeFrom(pb.MessageMetadata(**extra))
        return stored.envelope_batch(metadata.SerializeToString(), metadata, payload)

    assert schema_problem(envelope(good, good), check) is None
    problem = schema_problem(envelope(good, b'{"id": "x"}'), check)
    assert problem is not None and problem.startswith("message 1 (sequence id 1)")
    encrypted = envelope(b"\xff", b"\xff", encryption_keys=[pb.EncryptionKeys(key="k", value=b"w")],
                         encryption_param=b"iv")
    assert schema_problem(encrypted, check) is None
    # opened, each message carries the entry's schema version (Magnetar's readers see it)
    opened = stored.stored_messages(envelope(good, good))
    assert [m.schema_version for m in opened] == [0, 0]
