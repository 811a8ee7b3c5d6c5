"""/admin/v3/transactions: coordinators, transaction metadata, slow transactions,
transaction buffer and pending-ack views (Pulsar's paths), and abortTransaction (through
the coordinator's normal abort path; its owner or a superuser, every other endpoint a
superuser: see app.py)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, FastAPI

from magnetar_admin.deps import AgeMs, CoordinatorIdQuery, Service, TxnLeast, TxnMost
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import TopicNotFound, TransactionCoordinatorNotFoundError, TransactionNotFound
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_protocol.txnid import TxnID

# A status's name in the admin's JSON: magnetar.proto's TxnStatus name without "TXN_".
STATUS = {value: name.removeprefix("TXN_") for name, value in pb.TxnStatus.items()}


def _ms(t: datetime | None) -> int | None:
    return int(t.timestamp() * 1000) if t else None


def _topic(tenant: str, namespace: str, topic: str) -> TopicName:
    return TopicName.parse(f"persistent://{tenant}/{namespace}/{topic}")


async def _topic_id(service, tenant: str, namespace: str, topic: str) -> int:
    name = _topic(tenant, namespace, topic)
    topic_id = await service.store.topic_id(name)
    if topic_id is None:
        raise TopicNotFound(f"topic {name.full} does not exist")
    return topic_id


async def _metadata(service, txn: TxnID) -> dict:
    store = service.store
    row = await store.transaction(txn)
    if row is None:
        raise TransactionNotFound(f"transaction {txn} does not exist (or its retention passed)")
    parts = await store.transaction_partitions(txn)
    acked: dict[str, dict] = {}
    for topic, sub in await store.transaction_subscriptions(txn):
        acked.setdefault(topic, {})[sub] = {}
    return {
        "txnId": str(txn), "status": STATUS[row["status"]],
        "openTimestamp": _ms(row["opened_at"]), "timeoutAt": row["timeout_ms"],
        "deadline": _ms(row["deadline_at"]), "endTimestamp": _ms(row["ended_at"]),
        "owner": row["owner"], "timedOut": row["timed_out"],
        "producedPartitions": {t: {} for t in parts}, "ackedPartitions": acked,
    }


def transaction_routes() -> APIRouter:
    router = APIRouter(prefix="/admin/v3/transactions", tags=["transactions"])

    @router.get("/coordinators", summary="Transaction coordinators and their liveness")
    async def coordinators(service: Service) -> list[dict]:
        rows = await service.store.coordinators()
        return [{"coordinatorId": r["coordinator_id"], "url": r["url"], "alive": r["alive"],
                 "fenceEpoch": r["fence_epoch"], "adoptedBy": r["adopted_by"]} for r in rows]

    @router.get("/coordinatorStats", summary="Per-coordinator stats, keyed by coordinator id")
    async def coordinator_stats(service: Service, coordinatorId: CoordinatorIdQuery = None) -> dict:  # noqa: N803
        counts = await service.store.coordinator_counts()
        out = {}
        for r in await service.store.coordinators():
            if coordinatorId is not None and r["coordinator_id"] != coordinatorId:
                continue
            c = counts.get(r["coordinator_id"])
            out[str(r["coordinator_id"])] = {
                "state": "Ready" if r["alive"] else "None",
                "leastSigBits": r["next_txn_id"], "lowWaterMark": c["low_water_mark"] if c else None,
                "ongoingTxnSize": c["ongoing"] if c else 0, "committedTxnCount": c["committed"] if c else 0,
                "abortedTxnCount": c["aborted"] if c else 0, "url": r["url"],
                "adoptedBy": r["adopted_by"],
            }
        if coordinatorId is not None and not out:
            raise TransactionCoordinatorNotFoundError(f"coordinator {coordinatorId} does not exist")
        return out

    @router.get("/transactionMetadata/{most}/{least}", summary="One transaction's status and participants")
    async def transaction_metadata(most: TxnMost, least: TxnLeast, service: Service) -> dict:
        return await _metadata(service, TxnID(most, least))

    @router.get("/slowTransactions/{timeout_ms}", summary="Transactions open longer than timeout_ms")
    async def slow_transactions(timeout_ms: AgeMs, service: Service, coordinatorId: CoordinatorIdQuery = None) -> dict:  # noqa: N803
        txns = await service.store.slow_transactions(timeout_ms / 1000, coordinatorId)
        return {str(txn): await _metadata(service, txn) for txn in txns}

    @router.get("/transactionBufferStats/{tenant}/{namespace}/{topic}",
                summary="The topic's transaction buffer (from its owning broker)")
    async def buffer_stats(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        name = _topic(tenant, namespace, topic)
        topic_id = await _topic_id(service, tenant, namespace, topic)
        owner = (await service.store.owners([topic_id])).get(topic_id, {})
        live = None
        if owner.get("alive") and owner.get("url"):
            live = (await service.broker_call(owner["url"], "/internal/v1/transaction-buffer-stats", name.full))[1]
        return live or {"ongoingTxnSize": None, "maxReadPosition": None, "state": "NotLoaded"}

    @router.get("/transactionInBufferStats/{tenant}/{namespace}/{topic}/{most}/{least}",
                summary="One transaction in a topic's buffer")
    async def in_buffer(tenant: str, namespace: str, topic: str, most: TxnMost, least: TxnLeast,
                       service: Service) -> dict:
        topic_id = await _topic_id(service, tenant, namespace, topic)
        txn = TxnID(most, least)
        row = await service.store.txn_in_buffer(topic_id, txn)
        state = "OPEN" if row["committed"] is None else ("COMMITTED" if row["committed"] else "ABORTED")
        return {"txnId": str(txn), "state": state, "batches": row["batches"],
                "messages": row["messages"], "aborted": row["committed"] is False,
                "startPosition": f"{row['marker']}:0" if row["marker"] is not None else None}

    @router.get("/pendingAckStats/{tenant}/{namespace}/{topic}/{subscription}",
                summary="Transactional acks pending on a subscription")
    async def pending_ack_stats(tenant: str, namespace: str, topic: str, subscription: str,
                                service: Service) -> dict:
        validate_name_part("subscription", subscription)
        topic_id = await _topic_id(service, tenant, namespace, topic)
        pending = await service.store.pending_acks(topic_id, subscription)
        return {"ongoingTxnSize": len(pending),
                "ongoingTxns": {str(txn): {"pendingAckPositions": r["positions"],
                                           "cumulative": r["cumulative"]} for txn, r in pending.items()}}

    @router.get("/transactionInPendingAckStats/{tenant}/{namespace}/{topic}/{subscription}/{most}/{least}",
                summary="One transaction's pending acks on a subscription")
    async def in_pending_ack(tenant: str, namespace: str, topic: str, subscription: str, most: TxnMost,
                             least: TxnLeast, service: Service) -> dict:
        validate_name_part("subscription", subscription)
        topic_id = await _topic_id(service, tenant, namespace, topic)
        txn = TxnID(most, least)
        mine = (await service.store.pending_acks(topic_id, subscription)).get(txn)
        outcome = await service.store.subscription_outcome(topic_id, subscription, txn)
        return {"txnId": str(txn), "pendingAckPositions": mine["positions"] if mine else 0,
                "cumulative": bool(mine and mine["cumulative"]),
                "state": "PENDING" if mine else ("COMMITTED" if outcome else "ABORTED" if outcome is False else "NONE")}

    @router.post("/abortTransaction/{most}/{least}", status_code=204,
                 summary="Abort a transaction now (its owner or a superuser)")
    async def abort_transaction(most: TxnMost, least: TxnLeast, service: Service) -> None:
        txn = TxnID(most, least)
        owner = await service.store.transaction_owner(txn)
        service.auth.require_owner_or_superuser(owner, f"aborting transaction {txn}")
        rows = await service.store.coordinators()
        url = next((r["url"] for r in rows if r["coordinator_id"] == txn.most_bits and r["alive"]), None)
        if url is None:
            raise TransactionCoordinatorNotFoundError(f"coordinator {txn.most_bits} is not running")
        await service.rpc.call(url, "/v1/txn/end", pb.EndTxnRequest(txn=txn.to_wire(), action=pb.TXN_ABORT),
                               pb.EndTxnResponse)

    return router


def add_transaction_routes(app: FastAPI) -> None:
    app.include_router(transaction_routes())
