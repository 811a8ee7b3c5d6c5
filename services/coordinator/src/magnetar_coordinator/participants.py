"""Telling participants how a transaction ended: EndTxnOnPartition and
EndTxnOnSubscription to each partition's current owner, following ownership moves and
retrying until the broker has applied it (brokers apply them idempotently)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from google.protobuf.message import Message

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    InvalidTxnStatusError,
    MagnetarError,
    NamespaceNotFound,
    TenantNotFound,
    TopicNotFound,
)
from magnetar_runtime.rpc import RpcClient

log = logging.getLogger("magnetar.coordinator.participants")


class Participants:
    def __init__(self, rpc: RpcClient, live_brokers: Callable[[float], Awaitable[list[str]]], lease_ttl_s: float):
        self.rpc = rpc
        self._live_brokers = live_brokers  # async () -> list[url]
        self._ttl = lease_ttl_s
        # Partition -> owner URL, trusted until a call there fails (then looked up again).
        self._owners: dict[str, str] = {}

    async def _owner(self, topic: str) -> str:
        if cached := self._owners.get(topic):
            return cached
        brokers = await self._live_brokers(self._ttl)
        if not brokers:
            raise MagnetarError("no live broker")
        reply = await self.rpc.call(random.choice(brokers), "/v1/topics/lookup",
                                    pb.LookupRequest(topic=topic), pb.LookupResponse)
        if len(self._owners) > 100_000:
            self._owners.clear()
        url: str = reply.broker_url
        self._owners[topic] = url
        return url

    async def _until_done(self, what: str, topic: str, path: str, request: Message,
                          response_type: type[Message]) -> None:
        delay = 0.05
        while True:
            try:
                url = await self._owner(topic)
                await self.rpc.call(url, path, request, response_type)
                return
            except (TopicNotFound, NamespaceNotFound, TenantNotFound):
                # Gone, or never existed (a client may register any well-formed name):
                # no send or ack can have reached it, so there is nothing to end, and
                # retrying would keep the transaction's end call waiting for ever.
                log.warning("%s: topic %s is gone or never existed; nothing to end there", what, topic)
                return
            except BadRequest as exc:
                # A name no topic can have (auto-creation refuses "-", "t-partition--1"):
                # nothing was ever stored there either; retrying would hang the end call.
                log.warning("%s on %s refused for good (%s); nothing to end there", what, topic, exc)
                return
            except InvalidTxnStatusError as exc:
                # The participant ended it the other way: a bug or a manual intervention.
                log.error("%s on %s refused: %s", what, topic, exc)
                return
            except MagnetarError as exc:
                self._owners.pop(topic, None)
                log.info("%s on %s: %s; retrying in %.2fs", what, topic, exc, delay)
            except Exception:
                self._owners.pop(topic, None)
                log.exception("%s on %s failed; retrying in %.2fs", what, topic, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _one(self, txn: pb.TxnId, action: pb.TxnAction, topic: str, sub: str) -> Coroutine[Any, Any, None]:
        """The one-participant call, retried until done (following ownership moves)."""
        if not sub:
            return self._until_done("EndTxnOnPartition", topic, "/v1/txn/end-on-partition",
                                    pb.EndTxnOnPartitionRequest(topic=topic, txn=txn, action=action),
                                    pb.EndTxnOnPartitionResponse)
        return self._until_done("EndTxnOnSubscription", topic, "/v1/txn/end-on-subscription",
                                pb.EndTxnOnSubscriptionRequest(topic=topic, subscription=sub, txn=txn,
                                                               action=action),
                                pb.EndTxnOnSubscriptionResponse)

    async def _batch(self, url: str, txn: pb.TxnId, action: pb.TxnAction,
                     members: list[tuple[str, str]]) -> None:
        """Every participant a broker owns (as far as we know) in one request; the ones
        that fail there go the one-by-one way."""
        request = pb.EndTxnOnParticipantsRequest(
            txn=txn, action=action, partitions=[t for t, s in members if not s],
            subscriptions=[pb.TxnSubscription(topic=t, subscription=s) for t, s in members if s])
        try:
            reply = await self.rpc.call_coalesced(url, "/v1/txn/end-on-participants", request,
                                                  pb.EndTxnOnParticipantsResponse)
            retry = [(e.topic, e.subscription) for e in reply.errors]
        except MagnetarError as exc:
            log.info("EndTxnOnParticipants at %s: %s; one by one instead", url, exc)
            retry = members
        for topic, _ in retry:
            self._owners.pop(topic, None)
        await asyncio.gather(*(self._one(txn, action, t, s) for t, s in retry))

    async def end(self, txn: pb.TxnId, action: pb.TxnAction, partitions: list[str],
                  subscriptions: list[tuple[str, str]]) -> None:
        """Apply the outcome on every participant, concurrently; return when all have.
        Participants of a known owner go in one request per broker."""
        by_owner: dict[str, list[tuple[str, str]]] = {}
        unknown: list[tuple[str, str]] = []
        for topic, sub in [(t, "") for t in partitions] + list(subscriptions):
            if url := self._owners.get(topic):
                by_owner.setdefault(url, []).append((topic, sub))
            else:
                unknown.append((topic, sub))
        await asyncio.gather(
            *(self._batch(url, txn, action, members) for url, members in by_owner.items()),
            *(self._one(txn, action, t, s) for t, s in unknown))
