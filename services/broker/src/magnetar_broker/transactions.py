"""The broker's transaction endpoints: EndTxnOnPartition and EndTxnOnSubscription
(called by coordinators), and the coordinator lookup clients start from."""

from __future__ import annotations

import asyncio

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import to_wire
from magnetar_runtime.app import as_magnetar_error
from magnetar_protocol.topics import TopicName, validate_name_part

from magnetar_broker.service import BrokerService, check_listener
from magnetar_broker.store import Q
from magnetar_broker.subscription import Subscription



class TxnHandlers:
    def __init__(self, service: BrokerService):
        self.service = service

    async def coordinators(self, req: pb.LookupCoordinatorsRequest) -> pb.LookupCoordinatorsResponse:
        check_listener(req.listener_name)
        rows = await self.service.store.pool.fetch(
            Q["live_coordinators"], self.service.settings.lease_ttl_ms / 1000)
        urls = [r[1] for r in rows]
        if req.listener_name:
            urls = await self.service.advertised(
                req.listener_name, [(r[1], f"coordinator {r[0]}") for r in rows])
        return pb.LookupCoordinatorsResponse(
            coordinators=[pb.CoordinatorInfo(coordinator_id=r[0], url=url)
                          for r, url in zip(rows, urls)])

    async def registries(self, req: pb.LookupRegistryRequest) -> pb.LookupRegistryResponse:
        check_listener(req.listener_name)
        rows = await self.service.store.pool.fetch(
            Q["live_registries"], self.service.settings.lease_ttl_ms / 1000)
        urls = [r[0] for r in rows]
        if req.listener_name:
            urls = await self.service.advertised(
                req.listener_name, [(url, f"registry at {url}") for url in urls])
        return pb.LookupRegistryResponse(urls=urls)

    async def end_on_partition(self, req: pb.EndTxnOnPartitionRequest) -> pb.EndTxnOnPartitionResponse:
        self.service.auth.require_superuser("EndTxnOnPartition (a coordinator's call)")
        plog = await self.service.ownership.get_log(TopicName.parse(req.topic))
        await plog.end_txn((req.txn.most_bits, req.txn.least_bits), req.action == pb.TXN_COMMIT)
        return pb.EndTxnOnPartitionResponse()

    async def end_on_participants(self, req: pb.EndTxnOnParticipantsRequest) -> pb.EndTxnOnParticipantsResponse:
        """Many EndTxnOn* in one request (one per broker and transaction instead of one
        per participant), applied concurrently; failures are reported per participant."""
        self.service.auth.require_superuser("EndTxnOnParticipants (a coordinator's call)")

        async def one(topic: str, subscription: str, coro) -> pb.ParticipantError | None:
            try:
                await coro
                return None
            except Exception as exc:  # reported, not raised: the others went through
                return pb.ParticipantError(topic=topic, subscription=subscription,
                                           error=to_wire(as_magnetar_error(exc)))

        jobs = [one(t, "", self.end_on_partition(pb.EndTxnOnPartitionRequest(
                    topic=t, txn=req.txn, action=req.action))) for t in req.partitions]
        jobs += [one(s.topic, s.subscription, self.end_on_subscription(pb.EndTxnOnSubscriptionRequest(
                     topic=s.topic, subscription=s.subscription, txn=req.txn, action=req.action)))
                 for s in req.subscriptions]
        errors = [e for e in await asyncio.gather(*jobs) if e is not None]
        return pb.EndTxnOnParticipantsResponse(errors=errors)

    async def end_on_subscription(self, req: pb.EndTxnOnSubscriptionRequest) -> pb.EndTxnOnSubscriptionResponse:
        self.service.auth.require_superuser("EndTxnOnSubscription (a coordinator's call)")
        validate_name_part("subscription", req.subscription)
        plog = await self.service.ownership.get_log(TopicName.parse(req.topic))
        async with plog._sub_lock:
            sub = plog.subscriptions.get(req.subscription)
            if sub is None:
                # No consumer since this broker took over: load the durable cursor.
                sub = await Subscription.open_durable(plog, req.subscription, plog.next_entry_id - 1)
        await sub.end_txn((req.txn.most_bits, req.txn.least_bits), req.action == pb.TXN_COMMIT)
        return pb.EndTxnOnSubscriptionResponse()
