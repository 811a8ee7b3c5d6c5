"""The broker's transaction endpoints: ending a transaction on its participants here
(called by coordinators; one operation, many participants per request), and the
coordinator and registry lookups clients start from."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from magnetar_broker.ownership import Ownership
from magnetar_broker.service import check_listener
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_broker.txnend import end_on_participant
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import to_wire
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.auth import Authenticator
from magnetar_runtime.error_answers import as_magnetar_error

# (listener, [(internal URL, what it is)]) -> that listener's URLs, in that order
Advertised = Callable[[str, list[tuple[str, str]]], Awaitable[list[str]]]


class TxnHandlers:
    def __init__(self, auth: Authenticator, ownership: Ownership, store: BrokerStore,
                 settings: BrokerSettings, advertised: Advertised):
        self.auth = auth
        self.ownership = ownership
        self.store = store
        self.settings = settings
        self.advertised = advertised  # BrokerService.advertised: listener URLs

    async def coordinators(self, req: pb.LookupCoordinatorsRequest) -> pb.LookupCoordinatorsResponse:
        check_listener(req.listener_name)
        rows = await self.store.live_coordinators(self.settings.lease_ttl_ms / 1000)
        urls = [url for _, url in rows]
        if req.listener_name:
            urls = await self.advertised(
                req.listener_name, [(url, f"coordinator {c}") for c, url in rows])
        return pb.LookupCoordinatorsResponse(
            coordinators=[pb.CoordinatorInfo(coordinator_id=c, url=url)
                          for (c, _), url in zip(rows, urls)])

    async def registries(self, req: pb.LookupRegistryRequest) -> pb.LookupRegistryResponse:
        check_listener(req.listener_name)
        urls = await self.store.live_registries(self.settings.lease_ttl_ms / 1000)
        if req.listener_name:
            urls = await self.advertised(
                req.listener_name, [(url, f"registry at {url}") for url in urls])
        return pb.LookupRegistryResponse(urls=urls)

    async def end_on_participants(self, req: pb.EndTxnOnParticipantsRequest) -> pb.EndTxnOnParticipantsResponse:
        """EndTxnOnPartition and EndTxnOnSubscription of many participants in one request
        (one per broker and transaction), applied concurrently; failures are reported
        per participant."""
        self.auth.require_superuser("EndTxnOnParticipants (a coordinator's call)")
        txn, commit = TxnID.from_wire(req.txn), req.action == pb.TXN_COMMIT

        async def one(topic: str, subscription: str) -> pb.ParticipantError | None:
            try:
                await self._end(topic, subscription, txn, commit)
                return None
            except Exception as exc:  # reported, not raised: the others went through
                return pb.ParticipantError(topic=topic, subscription=subscription,
                                           error=to_wire(as_magnetar_error(exc)))

        jobs = [one(t, "") for t in req.partitions]
        jobs += [one(s.topic, s.subscription) for s in req.subscriptions]
        errors = [e for e in await asyncio.gather(*jobs) if e is not None]
        return pb.EndTxnOnParticipantsResponse(errors=errors)

    async def end_on_partition(self, req: pb.EndTxnOnPartitionRequest) -> pb.EndTxnOnPartitionResponse:
        """One participant (a coordinator's retry of one that failed in a batch)."""
        self.auth.require_superuser("EndTxnOnPartition (a coordinator's call)")
        await self._end(req.topic, "", TxnID.from_wire(req.txn), req.action == pb.TXN_COMMIT)
        return pb.EndTxnOnPartitionResponse()

    async def end_on_subscription(self, req: pb.EndTxnOnSubscriptionRequest) -> pb.EndTxnOnSubscriptionResponse:
        """One participant (a coordinator's retry of one that failed in a batch)."""
        self.auth.require_superuser("EndTxnOnSubscription (a coordinator's call)")
        await self._end(req.topic, req.subscription, TxnID.from_wire(req.txn),
                        req.action == pb.TXN_COMMIT)
        return pb.EndTxnOnSubscriptionResponse()

    async def _end(self, topic: str, subscription: str, txn: TxnID, commit: bool) -> None:
        await end_on_participant(self.ownership, topic, subscription, txn, commit)
