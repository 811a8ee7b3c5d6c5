"""Producer creation with PIP-68 access modes: admission, WaitForExclusive queueing
(long-polled by the client), fencing, and the durable topic epoch."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from dataclasses import dataclass

from magnetar_broker.authorization import Authorizer
from magnetar_broker.commands import CreateProducer
from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.access import MODE_NAMES as ACCESS_MODES
from magnetar_broker.partition.access import Outcome
from magnetar_broker.partition.log import PartitionLog, Producer
from magnetar_broker.partition.payloadcheck import Check, payload_check
from magnetar_broker.schemas import SchemaRegistry
from magnetar_broker.sessions import Session, SessionRegistry, new_object_id
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.subscription.subscription import FROM_LATEST, durable
from magnetar_protocol.errors import ProducerBusy, ProducerFenced
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_runtime.auth import current_role
from magnetar_runtime.permissions import CONSUME, PRODUCE

log = logging.getLogger("magnetar.broker.producers")


@dataclass(frozen=True, slots=True)
class ProducerCreated:
    """CreateProducer's result: the producer, or None while a WaitForExclusive one waits
    (its name kept for the next try); the last sequence id stored for its name."""

    producer: Producer | None
    name: str
    last_sequence_id: int
    schema_version: int | None = None  # the version of the producer's schema (None: none)

    @property
    def waiting(self) -> bool:
        return self.producer is None


class ProducerHandlers:
    """CreateProducer: given the parts it uses, not the whole service."""

    def __init__(self, sessions: SessionRegistry, authz: Authorizer, ownership: Ownership,
                 producers: dict[int, Producer], broker_id: str, settings: BrokerSettings,
                 schemas: SchemaRegistry):
        self.sessions = sessions
        self.schemas = schemas
        self.authz = authz
        self.ownership = ownership
        self.producers = producers  # every producer of this broker, by id
        self.broker_id = broker_id
        self.settings = settings
        self._names = itertools.count(1)  # broker-chosen producer names

    async def create(self, cmd: CreateProducer) -> ProducerCreated:
        role = current_role()
        session = self.sessions.get(cmd.session_id, time.monotonic(), role)
        topic = TopicName.parse(cmd.topic)
        await self.authz.require(topic, PRODUCE)
        plog = await self.ownership.get_log(topic)
        # The schema first (Pulsar registers it before the producer exists): refused
        # with IncompatibleSchema, or its version, and the payload check under
        # schemaValidationEnforced.
        version, policy = await self.schemas.for_producer(topic, cmd.schema)
        check = payload_check(cmd.schema) if policy.validation_enforced and cmd.schema is not None else None
        if cmd.initial_subscription:
            validate_name_part("subscription", cmd.initial_subscription)
            await self.authz.require(topic, CONSUME, cmd.initial_subscription)
            await durable(plog, cmd.initial_subscription, FROM_LATEST)
        name = cmd.name
        if name:
            validate_name_part("producer", name)
        else:
            name = f"{self.broker_id}-{next(self._names)}-{uuid.uuid4().hex[:8]}"
        wait_s = min(cmd.wait_ms, self.settings.max_fetch_wait_ms) / 1000

        async def attempt() -> ProducerCreated | None:
            async with plog.producer_lock:
                return await self._try_create(plog, session, name, cmd.access_mode, cmd.topic_epoch,
                                              cmd.client_producer_id, version, check)

        session.inflight += 1
        try:
            created = await plog.long_poll(wait_s, attempt)
        finally:
            session.inflight -= 1
            session.last_seen = time.monotonic()
        return created or ProducerCreated(None, name, -1)

    async def _try_create(self, plog: PartitionLog, session: Session, name: str, mode: int,
                          requested: int | None, client_id: int, schema_version: int | None,
                          check: Check | None) -> ProducerCreated | None:
        """Create the producer now, or None when a WaitForExclusive one must keep waiting."""
        for other in plog.producers.values():
            if other.name == name:
                # A retried create of the same producer (its session, its client-side id)
                # is answered again; any other producer with that name is refused, even
                # one of the same client (Pulsar's rule).
                if other.session_id == session.session_id and client_id and \
                        other.client_producer_id == client_id:
                    return ProducerCreated(other, name, await plog.last_sequence_id(name), other.schema_version)
                raise ProducerBusy(f"producer {name!r} is already connected to {plog.name.full}")
        if name in plog.fenced_waiters:
            plog.fenced_waiters.discard(name)
            session.waiting.discard((plog.name.full, name))
            raise ProducerFenced(f"producer {name!r} was fenced while waiting for exclusive access")
        decision = plog.access.admit(mode, name, requested)
        if decision.outcome is Outcome.WAIT:
            plog.access.enqueue(name)
            session.waiting.add((plog.name.full, name))
            return None
        # The epoch is recorded before anyone is fenced: a broker that lost its lease
        # meanwhile refuses the new producer and must not have fenced the old ones for it.
        if decision.epoch is not None and decision.epoch != plog.access.topic_epoch:
            await plog.persist_topic_epoch(decision.epoch)
        for producer_id in decision.fence:
            if producer := self.producers.get(producer_id):
                self._fence_producer(producer)
        if decision.fence_waiters:
            plog.fenced_waiters.update(w for w in plog.access.waiters if w != name)
            plog.access.waiters.clear()
        last = await plog.last_sequence_id(name)
        plog.check_open()
        producer = Producer(new_object_id(), name, session.session_id, mode, plog,
                            role=session.role, topic_epoch=decision.epoch,
                            client_producer_id=client_id, schema_version=schema_version,
                            payload_check=check)
        plog.producers[producer.producer_id] = producer
        plog.access.attach(producer.producer_id, mode, name, decision.epoch)
        session.waiting.discard((plog.name.full, name))
        self.producers[producer.producer_id] = producer
        session.producers.add(producer.producer_id)
        if decision.fence or decision.epoch is not None:
            log.info("%s: producer %r is exclusive (%s) at topic epoch %s", plog.name.full, name,
                     ACCESS_MODES[mode], decision.epoch)
        plog.wake()
        return ProducerCreated(producer, name, last, schema_version)

    def _fence_producer(self, producer: Producer) -> None:
        """Lost exclusivity: detach, but keep answering its sends with ProducerFenced."""
        producer.fenced = True
        producer.log.producers.pop(producer.producer_id, None)
        producer.log.access.detach(producer.producer_id)
        log.info("%s: fenced producer %r", producer.log.name.full, producer.name)
        producer.detached("fenced: another exclusive producer took over")
