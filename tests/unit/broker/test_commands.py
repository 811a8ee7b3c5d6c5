"""The broker's domain commands carry the rules a request must satisfy, so the HTTP and
Pulsar front ends, which both translate into them, refuse the same requests the same way."""

import pytest

from magnetar_broker.api import seek_command, subscribe_command
from magnetar_broker.commands import Position, Seek, Subscribe
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest


def test_a_subscription_type_must_be_one_the_broker_knows():
    with pytest.raises(BadRequest, match="unknown subscription type 7"):
        Subscribe(session_id="s", topic="t", subscription="x", sub_type=7, durable=True)
    # The protobuf front end's translation is the same command: the same refusal.
    with pytest.raises(BadRequest, match="unknown subscription type 7"):
        subscribe_command(pb.SubscribeRequest(topic="t", subscription="x", sub_type=7, durable=True))
    assert Subscribe(session_id="s", topic="t", subscription="x", sub_type=pb.SUB_KEY_SHARED,
                     durable=True).sub_type == pb.SUB_KEY_SHARED


def test_a_seek_names_a_position_or_a_publish_time():
    with pytest.raises(BadRequest, match="seek needs a position or a publish_time"):
        Seek(consumer_id=1, session_id="s")
    with pytest.raises(BadRequest, match="seek needs a position or a publish_time"):
        seek_command(pb.SeekRequest(consumer_id=1))
    assert seek_command(pb.SeekRequest(consumer_id=1, publish_time=0)).publish_time == 0  # 0 is a time
    assert seek_command(pb.SeekRequest(consumer_id=1, position=pb.Position(entry_id=5, batch_index=2))
                        ).position == Position(5, 2)


def test_the_protobuf_translation_keeps_a_readers_start():
    cmd = subscribe_command(pb.SubscribeRequest(topic="t", sub_type=pb.SUB_EXCLUSIVE, durable=False,
                                                start_position=pb.Position(entry_id=3, batch_index=-1),
                                                start_inclusive=True, initial_position=pb.INITIAL_EARLIEST))
    assert (cmd.start, cmd.start_inclusive, cmd.earliest, cmd.durable) == (Position(3, -1), True, True, False)
    assert subscribe_command(pb.SubscribeRequest(topic="t", durable=True)).start is None
