"""Transactions over Pulsar's protocol: TC_CLIENT_CONNECT, NEW_TXN, ADD_PARTITION_TO_TXN,
ADD_SUBSCRIPTION_TO_TXN and END_TXN, answered by Magnetar's own coordinators (the
routes /v1/txn/new, /add-partitions, /add-subscriptions and /end that Magnetar's client
calls), so state, ownership, timeouts and the commit's fan-out have one implementation.

A Pulsar client finds its coordinators through the partitioned system topic
``persistent://pulsar/system/transaction_coordinator_assign``: one partition per
coordinator, its number the TCID (the transaction id's most bits).  Every broker's
listener serves every TCID (it forwards to the coordinator that holds it), so LOOKUP
of a partition answers this broker.  Calls carry the client's token: the coordinator
sees the client's role, as when Magnetar's client calls it itself."""

from __future__ import annotations

import logging

from magnetar_broker.pulsar.connection import Connection
from magnetar_broker.pulsar.errors import failure
from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    ConnectError,
    MagnetarError,
    TransactionCoordinatorNotFoundError,
)
from magnetar_runtime.rpc import RpcClient

log = logging.getLogger("magnetar.broker.pulsar")

Type = pb.BaseCommand.Type
TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
_PARTITION = "-partition-"
# A commit answers once every participant applied it (the coordinator's fan-out).
COORDINATOR_TIMEOUT_S = 30.0
ACTIONS = {pb.COMMIT: mpb.TXN_COMMIT, pb.ABORT: mpb.TXN_ABORT}


def is_tc_assign(topic: str) -> bool:
    """The coordinator-assignment topic or one of its partitions (a TCID each)."""
    return topic == TC_ASSIGN_TOPIC or topic.startswith(TC_ASSIGN_TOPIC + _PARTITION)


async def live_coordinators(service) -> dict[int, str]:
    """TCID -> internal URL of each coordinator holding its TCID right now."""
    return await service.live_coordinators()


async def tc_assign_partitions(service) -> int:
    """PARTITIONED_METADATA of the assignment topic: TCIDs 0 .. highest live one (a gap
    is a TCID whose coordinator is down: TC_CLIENT_CONNECT to it is refused)."""
    return max(await live_coordinators(service), default=-1) + 1


class Transactions:
    def __init__(self, conn: Connection, rpc: RpcClient) -> None:
        self.conn = conn
        self.service = conn.service
        self.rpc = rpc

    def handlers(self) -> dict:
        return {Type.TC_CLIENT_CONNECT_REQUEST: self.tc_connect, Type.NEW_TXN: self.new_txn,
                Type.ADD_PARTITION_TO_TXN: self.add_partitions,
                Type.ADD_SUBSCRIPTION_TO_TXN: self.add_subscriptions, Type.END_TXN: self.end}

    async def _coordinator(self, tcid: int) -> str:
        url = (await live_coordinators(self.service)).get(tcid)
        if url is None:
            raise TransactionCoordinatorNotFoundError(
                f"transaction coordinator {tcid} is not running (a transaction id's most bits are "
                "its coordinator's TCID)")
        return url

    async def _call(self, tcid: int, path: str, request, response_type):
        url = await self._coordinator(tcid)
        try:
            return await self.rpc.call(url, path, request, response_type, headers=self.conn.credentials)
        except ConnectError as exc:
            # Down or moving: the Pulsar client looks the coordinator up again.
            raise TransactionCoordinatorNotFoundError(
                f"transaction coordinator {tcid} did not answer: {exc.message}") from None

    async def _answer(self, reply_type, cmd, call, **fields) -> None:
        """Run ``call()`` and answer ``reply_type`` with the request id (and ``fields``),
        or the same reply carrying the error: these commands have their own error fields."""
        reply = reply_type(request_id=cmd.request_id, **fields)
        try:
            extra = await call()
            for name, value in (extra or {}).items():
                setattr(reply, name, value)
        except Exception as exc:
            if not isinstance(exc, MagnetarError):  # a bug must not end the connection silently
                log.exception("pulsar connection %s: %s failed", self.conn.peer, reply_type.DESCRIPTOR.name)
            reply.error, reply.message = failure(exc)
        self.conn.send(reply)

    @staticmethod
    def _txn(cmd) -> mpb.TxnId:
        return mpb.TxnId(most_bits=cmd.txnid_most_bits, least_bits=cmd.txnid_least_bits)

    def _ids(self, cmd) -> dict:
        return {"txnid_most_bits": cmd.txnid_most_bits, "txnid_least_bits": cmd.txnid_least_bits}

    # ---------------------------------------------------------------- commands

    async def tc_connect(self, frame) -> None:
        """The client's handshake with coordinator ``tc_id``: answered when it runs."""
        cmd = frame.body

        async def call():
            await self._coordinator(cmd.tc_id)

        await self._answer(pb.CommandTcClientConnectResponse, cmd, call)

    async def new_txn(self, frame) -> None:
        cmd = frame.body

        async def call():
            ttl_ms = cmd.txn_ttl_seconds * 1000
            reply = await self._call(cmd.tc_id, "/v1/txn/new", mpb.NewTxnRequest(
                timeout_ms=ttl_ms, client_name=f"pulsar {self.conn.peer}"), mpb.NewTxnResponse)
            return {"txnid_most_bits": reply.txn.most_bits, "txnid_least_bits": reply.txn.least_bits}

        await self._answer(pb.CommandNewTxnResponse, cmd, call)

    async def add_partitions(self, frame) -> None:
        cmd = frame.body

        async def call():
            if not cmd.partitions:
                raise BadRequest("ADD_PARTITION_TO_TXN names no partitions")
            await self._call(cmd.txnid_most_bits, "/v1/txn/add-partitions", mpb.AddPartitionToTxnRequest(
                txn=self._txn(cmd), topics=list(cmd.partitions)), mpb.AddPartitionToTxnResponse)

        await self._answer(pb.CommandAddPartitionToTxnResponse, cmd, call, **self._ids(cmd))

    async def add_subscriptions(self, frame) -> None:
        cmd = frame.body

        async def call():
            if not cmd.subscription:
                raise BadRequest("ADD_SUBSCRIPTION_TO_TXN names no subscriptions")
            subs = [mpb.TxnSubscription(topic=s.topic, subscription=s.subscription) for s in cmd.subscription]
            await self._call(cmd.txnid_most_bits, "/v1/txn/add-subscriptions", mpb.AddSubscriptionToTxnRequest(
                txn=self._txn(cmd), subscriptions=subs), mpb.AddSubscriptionToTxnResponse)

        await self._answer(pb.CommandAddSubscriptionToTxnResponse, cmd, call, **self._ids(cmd))

    async def end(self, frame) -> None:
        """Commit or abort; answered once every participant applied it.  Ending again
        the same way answers success (a client's retry), the other way InvalidTxnStatus."""
        cmd = frame.body

        async def call():
            if not cmd.HasField("txn_action") or cmd.txn_action not in ACTIONS:
                raise BadRequest("END_TXN needs txn_action COMMIT or ABORT")
            await self._call(cmd.txnid_most_bits, "/v1/txn/end", mpb.EndTxnRequest(
                txn=self._txn(cmd), action=ACTIONS[cmd.txn_action]), mpb.EndTxnResponse)

        await self._answer(pb.CommandEndTxnResponse, cmd, call, **self._ids(cmd))
