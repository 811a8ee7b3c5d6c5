"""Dead-letter moves across partitions and brokers (docs/operations.md, "Dead-letter
topics"): the ``Sink`` every subscription served here writes its moves through
(subscription/deadletters.py), and the destination's side of a move.

A move is written by the owner of the dead-letter partition, in ONE SQL transaction:

1. the copies, through that partition's writer (``Writer.write_in`` under ``hold``: in
   order with its other writes, lease-checked against its owner, numbered by a producer
   of the move's own, ``<source partition>-<subscription>-DLQ``);
2. the initial subscription, when the policy names one and it does not exist yet;
3. the source subscription's cursor with the originals acknowledged, checked against
   the *source* partition's lease as the source broker holds it (broker id and epoch):
   the same statement its own cursor writes use.

When the dead-letter partition is served here the source calls that side in process;
otherwise over ``/v1/dead-letters/append`` of the broker that owns it (service role
only).  Either lease moving rolls the whole transaction back; a reply lost after the
commit leaves the source unsure, so it reloads the subscription from the database,
which says which happened.  So a message is in exactly one place after any crash.
"""

from __future__ import annotations

import zlib

from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.planner import Append
from magnetar_broker.partition.writer import Written
from magnetar_broker.store import BrokerStore
from magnetar_broker.subscription.deadletters import Move
from magnetar_broker.subscription.deadrules import numbered
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import MagnetarError, NotOwner
from magnetar_protocol.topics import TopicName
from magnetar_runtime.error_answers import write_failure
from magnetar_runtime.failpoints import failpoint
from magnetar_runtime.rpc import RpcClient

APPEND_PATH = "/v1/dead-letters/append"


class DeadLetterMoves:
    """The dead-letter sink of this broker's subscriptions, and the append it serves to
    the others."""

    def __init__(self, ownership: Ownership, store: BrokerStore, broker_id: str, rpc: RpcClient) -> None:
        self.ownership = ownership
        self.store = store
        self.broker_id = broker_id
        self.rpc = rpc

    async def move(self, move: Move) -> None:
        """Write ``move`` (subscription/deadletters.Sink): here or on the dead-letter
        partition's owner."""
        name = TopicName.parse(move.topic)
        partitions = await self.ownership.partitions(name)  # created if auto-creation allows
        if partitions:
            # A partitioned dead-letter topic: each source partition's moves go to one of
            # its partitions, so they stay in order there.
            name = name.partition(zlib.crc32(move.source_topic.encode()) % partitions)
        req = pb.DeadLetterAppendRequest(
            topic=name.full, initial_subscription=move.initial_subscription,
            producer_name=f"{move.source_topic}-{move.subscription}-DLQ", batch=move.batch,
            num_messages=move.num_messages, source_topic_id=move.source_topic_id,
            source_topic=move.source_topic, source_broker=self.broker_id, source_epoch=move.source_epoch,
            subscription=move.subscription, mark_delete=move.mark_delete, acked_state=move.acked_state,
            deliver_at_time=move.deliver_at)
        broker_id, url = await self.ownership.lookup(name)
        if broker_id == self.broker_id:
            await self.append(req)
        else:
            await self.rpc.call(url, APPEND_PATH, req, pb.DeadLetterAppendResponse)
        failpoint("broker.dead_letter_moved")  # written; the source's memory not yet updated

    async def append(self, req: pb.DeadLetterAppendRequest) -> pb.DeadLetterAppendResponse:
        """The destination's side: the copies and the source's cursor in one SQL
        transaction.  Raises (nothing written) when this broker does not own the
        destination or the source broker no longer holds the source's lease."""
        plog = await self.ownership.get_log(TopicName.parse(req.topic))
        async with plog.writer.hold():
            plog.check_open()
            name = req.producer_name
            first = max(await plog.dedup_state.last_persisted(name), plog.dedup_state.last_pushed(name)) + 1
            item = Append(None, name, first, first + req.num_messages - 1, req.num_messages,
                          numbered(req.batch, first))
            try:
                async with self.store.transaction() as conn:
                    if req.initial_subscription:
                        # Before the copies, so it starts right before them and sees them.
                        await self.store.create_subscription_in(
                            conn, plog.topic_id, plog.epoch, req.initial_subscription, plog.next_entry_id - 1)
                    written = await plog.writer.write_in(conn, [item])
                    if not isinstance(written, Written):
                        if written.lease_lost:
                            plog.lose("fenced while appending dead letters")
                        raise NotOwner(f"{plog.name.full} is no longer served by broker {self.broker_id}")
                    if not await self.store.save_cursor_for(conn, req.source_topic_id, req.source_broker,
                                                            req.source_epoch, req.subscription, req.mark_delete,
                                                            req.acked_state):
                        raise NotOwner(f"{req.source_topic} is no longer served by broker {req.source_broker} "
                                       f"at epoch {req.source_epoch}: nothing moved")
                    failpoint("broker.dead_letter_before_commit")
            except MagnetarError:
                raise  # rolled back: nothing written
            except Exception as exc:
                # The commit's outcome is unknown: reload the partition from the database
                # (the source does the same with its subscription on this answer).
                plog.lose(f"a dead-letter append failed: {exc}")
                raise write_failure(exc, f"could not append dead letters to {plog.name.full}") from exc
            failpoint("broker.dead_letter_after_commit")
            plog.writer.applied(written)
            return pb.DeadLetterAppendResponse(entry_id=written.plan.results[0])
