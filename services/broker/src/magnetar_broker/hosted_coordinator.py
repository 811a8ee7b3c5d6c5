"""A broker that also runs the transaction coordinator (``MAGNETAR_HOST_COORDINATOR``),
as Pulsar's brokers host theirs.  On a small machine this saves a process and, for the
participants this broker owns, the commit's HTTP hop: EndTxnOnParticipants (and topic
lookups) from the coordinator to this broker are calls in this process
(``RpcClient.serve_locally``), and a transaction whose participants this broker alone
serves ends in one SQL transaction (``txnend.py``, issue 18), and a small transaction
whose data travel with its commit is written with it in one SQL transaction
(``onerequest.py``, issue 26).  Fencing is unchanged: the coordinator claims
its TCID, writes its transitions and is fenced exactly as the standalone one is, and a
broker elsewhere is still told over HTTP (docs/architecture.md)."""

from __future__ import annotations

from magnetar_broker.api import add_routes as add_broker_routes
from magnetar_broker.api import txn_handlers
from magnetar_broker.onerequest import OneRequestEnds
from magnetar_broker.service import BrokerService
from magnetar_broker.txnend import LocalEnds
from magnetar_coordinator.api import add_routes as add_coordinator_routes
from magnetar_coordinator.service import CoordinatorService, new_instance_id
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_runtime.app import proto_route


class BrokerWithCoordinator:
    """The service object of a broker process hosting a coordinator: both start, stop
    and are ready together."""

    def __init__(self, broker: BrokerService, coordinator: CoordinatorService) -> None:
        self.broker = broker
        self.coordinator = coordinator

    @classmethod
    def build(cls, broker: BrokerService, pool, auth) -> "BrokerWithCoordinator":
        settings = CoordinatorSettings()  # the same MAGNETAR_* variables the broker read
        store = CoordinatorStore(pool, settings.resolved_coordinator_id(), new_instance_id())
        # Transactions whose participants this broker alone serves end in one SQL
        # transaction (issue 18); the rest take the two-phase path.
        # Small transactions whose data travel with their commit are written with it in one
        # SQL transaction (issue 26, onerequest.py).
        one_request = OneRequestEnds(broker.ownership, broker.store, broker.authz, broker.producer,
                                     broker.settings.max_batch_messages)
        coordinator = CoordinatorService(store, settings, auth, local=LocalEnds(broker.ownership),
                                         one_request=one_request)
        broker.holds_acks = coordinator.one_request is not None
        return cls(broker, coordinator)

    @property
    def ready(self) -> bool:
        return self.broker.ready and self.coordinator.ready

    async def start(self) -> None:
        await self.broker.start()
        await self.coordinator.start()

    async def release_leases(self) -> None:
        """SIGTERM's first step, as a plain broker's: hand the partitions over at once.
        The coordinator keeps driving its commits (through uvicorn's wait and then
        ``stop``); one that still needs a partition of this broker follows it to its
        new owner, as it would from a coordinator process."""
        await self.broker.release_leases()

    async def stop(self) -> None:
        await self.coordinator.stop()  # waits for the commits it drives, releases the TCID
        await self.broker.stop()


def add_routes(app, service: BrokerWithCoordinator) -> None:
    """The broker's routes, the coordinator's, and the coordinator's calls to this
    process's own routes made in process."""
    add_broker_routes(app, service.broker)
    add_coordinator_routes(app, service.coordinator)
    # Both answer /v1/txn/coordinators from the same table; the later route serves it,
    # and the broker's is the one that answers a client's listener_name.
    proto_route(app, "/v1/txn/coordinators", pb.LookupCoordinatorsRequest,
                txn_handlers(service.broker).coordinators)
    service.coordinator.rpc.serve_locally(
        service.broker.settings.url, app.state.proto_handlers, service.coordinator.auth.own_role())
