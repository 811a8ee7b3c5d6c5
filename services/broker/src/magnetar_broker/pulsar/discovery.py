"""Discovery over Pulsar's protocol: PARTITIONED_METADATA, LOOKUP and
GET_TOPICS_OF_NAMESPACE, on the service's metadata and lookup (the routes'
/v1/topics/metadata and /v1/topics/lookup)."""

from __future__ import annotations

from magnetar_broker.pulsar.connection import Connection, answer
from magnetar_broker.pulsar.errors import failure
from magnetar_broker.pulsar.transactions import TC_ASSIGN_TOPIC, is_tc_assign, tc_assign_partitions
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import BadRequest, MagnetarError

Type = pb.BaseCommand.Type
Lookup = pb.CommandLookupTopicResponse
Metadata = pb.CommandPartitionedTopicMetadataResponse


class Discovery:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.service = conn.service

    def handlers(self) -> dict:
        return {Type.PARTITIONED_METADATA: self.partitioned_metadata, Type.LOOKUP: self.lookup,
                Type.GET_TOPICS_OF_NAMESPACE: self.topics_of_namespace}

    async def partitioned_metadata(self, frame) -> None:
        cmd = frame.body
        try:
            if is_tc_assign(cmd.topic):   # one partition per coordinator (transactions.py)
                partitions = 0 if cmd.topic != TC_ASSIGN_TOPIC else await tc_assign_partitions(self.service)
            else:
                _, partitions = await self.service.metadata(cmd.topic)
        except MagnetarError as exc:
            error, message = failure(exc)
            self.conn.send(Metadata(request_id=cmd.request_id, response=Metadata.Failed,
                                    error=error, message=message))
            return
        self.conn.send(Metadata(request_id=cmd.request_id, partitions=partitions, response=Metadata.Success))

    async def lookup(self, frame) -> None:
        cmd = frame.body
        try:
            url = await self.owner_url(cmd.topic, cmd.advertised_listener_name)
        except MagnetarError as exc:
            error, message = failure(exc)
            self.conn.send(Lookup(request_id=cmd.request_id, response=Lookup.Failed,
                                  error=error, message=message))
            return
        # The owner's URL with Connect (not Redirect): the answer is authoritative, as a
        # Pulsar broker's is once it found the owner; any broker answers any topic.
        # A TLS listener's URL goes in broker_service_url_tls, which a TLS client uses
        # (Pulsar fills both from brokerServiceUrl and brokerServiceUrlTls); a broker
        # has one Pulsar port, so both carry the one URL it has.
        self.conn.send(Lookup(request_id=cmd.request_id, response=Lookup.Connect, broker_service_url=url,
                              broker_service_url_tls=url if url.startswith("pulsar+ssl://") else "",
                              authoritative=True))

    async def owner_url(self, topic: str, listener: str = "") -> str:
        """The owner's pulsar:// URL on the listener the client names (its
        listener_name; none: the default one)."""
        if is_tc_assign(topic):   # any listener serves every coordinator
            return await self.service.pulsar_url(self.service.broker_id, self.service.settings.url, listener)
        owner = await self.service.lookup(topic)
        return await self.service.pulsar_url(owner.broker_id, owner.url, listener)

    async def topics_of_namespace(self, frame) -> None:
        cmd = frame.body

        async def listing() -> list[str]:
            tenant, sep, namespace = cmd.namespace.partition("/")
            if not sep or not tenant or not namespace or "/" in namespace:
                raise BadRequest(f"namespace {cmd.namespace!r} must be TENANT/NAMESPACE")
            if cmd.mode == pb.CommandGetTopicsOfNamespace.NON_PERSISTENT:
                return []   # Magnetar has persistent topics only
            return await self.service.topics_of_namespace(tenant, namespace)  # what the caller may look up

        await answer(self.conn, cmd.request_id, listing,
                     lambda topics: pb.CommandGetTopicsOfNamespaceResponse(
                         request_id=cmd.request_id, topics=topics, filtered=False, changed=True))
