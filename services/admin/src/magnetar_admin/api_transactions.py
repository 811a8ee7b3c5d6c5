"""/admin/v3/transactions: coordinators, transaction metadata, slow transactions,
transaction buffer and pending-ack views (Pulsar's paths), and abortTransaction (through
the coordinator's normal abort path; its owner or a superuser, every other endpoint a
superuser: see app.py)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, FastAPI

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import TopicNotFound, TransactionCoordinatorNotFoundError, TransactionNotFound
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_storage.queries import load_queries

from magnetar_admin.api import AgeMs, CoordinatorIdQuery, Service, TxnLeast, TxnMost

Q = load_queries("magnetar_admin", "transactions.sql")
STATUS = {0: "OPEN", 1: "COMMITTING", 2: "COMMITTED", 3: "ABORTING", 4: "ABORTED"}


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


async def _metadata(service, most: int, least: int) -> dict:
    pool = service.store.pool
    row = await pool.fetchrow(Q["transaction"], most, least)
    if row is None:
        raise TransactionNotFound(f"transaction ({most},{least}) does not exist (or its retention passed)")
    parts = [r[0] for r in await pool.fetch(Q["transaction_partitions"], most, least)]
    subs = await pool.fetch(Q["transaction_subscriptions"], most, least)
    acked: dict[str, dict] = {}
    for topic, sub in subs:
        acked.setdefault(topic, {})[sub] = {}
    return {
        "txnId": f"({most},{least})", "status": STATUS[row["status"]],
        "openTimestamp": _ms(row["opened_at"]), "timeoutAt": row["timeout_ms"],
        "deadline": _ms(row["deadline_at"]), "endTimestamp": _ms(row["ended_at"]),
        "owner": row["owner"], "timedOut": row["timed_out"],
        "producedPartitions": {t: {} for t in parts}, "ackedPartitions": acked,
    }


def transaction_routes() -> APIRouter:
    router = APIRouter(prefix="/admin/v3/transactions", tags=["transactions"])

    @router.get("/coordinators", summary="Transaction coordinators and their liveness")
    async def coordinators(service: Service) -> list[dict]:
        rows = await service.store.pool.fetch(Q["coordinators"], service.store.ttl_s)
        return [{"coordinatorId": r["coordinator_id"], "url": r["url"], "alive": r["alive"],
                 "fenceEpoch": r["fence_epoch"], "adoptedBy": r["adopted_by"]} for r in rows]

    @router.get("/coordinatorStats", summary="Per-coordinator stats, keyed by coordinator id")
    async def coordinator_stats(service: Service, coordinatorId: CoordinatorIdQuery = None) -> dict:  # noqa: N803
        pool = service.store.pool
        counts = {r["coordinator_id"]: r for r in await pool.fetch(Q["coordinator_counts"])}
        out = {}
        for r in await pool.fetch(Q["coordinators"], service.store.ttl_s):
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
        return await _metadata(service, most, least)

    @router.get("/slowTransactions/{timeout_ms}", summary="Transactions open longer than timeout_ms")
    async def slow_transactions(timeout_ms: AgeMs, service: Service, coordinatorId: CoordinatorIdQuery = None) -> dict:  # noqa: N803
        rows = await service.store.pool.fetch(Q["slow_transactions"], timeout_ms / 1000, coordinatorId)
        return {f"({r[0]},{r[1]})": await _metadata(service, r[0], r[1]) for r in rows}

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
        row = await service.store.pool.fetchrow(Q["txn_in_buffer"], topic_id, most, least)
        state = "OPEN" if row["committed"] is None else ("COMMITTED" if row["committed"] else "ABORTED")
        return {"txnId": f"({most},{least})", "state": state, "batches": row["batches"],
                "messages": row["messages"], "aborted": row["committed"] is False,
                "startPosition": f"{row['marker']}:0" if row["marker"] is not None else None}

    @router.get("/pendingAckStats/{tenant}/{namespace}/{topic}/{subscription}",
                summary="Transactional acks pending on a subscription")
    async def pending_ack_stats(tenant: str, namespace: str, topic: str, subscription: str,
                                service: Service) -> dict:
        validate_name_part("subscription", subscription)
        topic_id = await _topic_id(service, tenant, namespace, topic)
        rows = await service.store.pool.fetch(Q["pending_acks"], topic_id, subscription)
        return {"ongoingTxnSize": len(rows),
                "ongoingTxns": {f"({r[0]},{r[1]})": {"pendingAckPositions": r["positions"],
                                                      "cumulative": r["cumulative"]} for r in rows}}

    @router.get("/transactionInPendingAckStats/{tenant}/{namespace}/{topic}/{subscription}/{most}/{least}",
                summary="One transaction's pending acks on a subscription")
    async def in_pending_ack(tenant: str, namespace: str, topic: str, subscription: str, most: TxnMost,
                             least: TxnLeast, service: Service) -> dict:
        validate_name_part("subscription", subscription)
        topic_id = await _topic_id(service, tenant, namespace, topic)
        pool = service.store.pool
        mine = [r for r in await pool.fetch(Q["pending_acks"], topic_id, subscription) if (r[0], r[1]) == (most, least)]
        outcome = await pool.fetchval(Q["sub_outcome"], topic_id, subscription, most, least)
        return {"txnId": f"({most},{least})", "pendingAckPositions": mine[0]["positions"] if mine else 0,
                "cumulative": bool(mine and mine[0]["cumulative"]),
                "state": "PENDING" if mine else ("COMMITTED" if outcome else "ABORTED" if outcome is False else "NONE")}

    @router.post("/abortTransaction/{most}/{least}", status_code=204,
                 summary="Abort a transaction now (its owner or a superuser)")
    async def abort_transaction(most: TxnMost, least: TxnLeast, service: Service) -> None:
        owner = await service.store.pool.fetchval(Q["transaction_owner"], most, least)
        service.auth.require_owner_or_superuser(owner, f"aborting transaction ({most},{least})")
        rows = await service.store.pool.fetch(Q["coordinators"], service.store.ttl_s)
        url = next((r["url"] for r in rows if r["coordinator_id"] == most and r["alive"]), None)
        if url is None:
            raise TransactionCoordinatorNotFoundError(f"coordinator {most} is not running")
        await service.rpc.call(url, "/v1/txn/end", pb.EndTxnRequest(txn=pb.TxnId(most_bits=most, least_bits=least),
                                                            action=pb.TXN_ABORT), pb.EndTxnResponse)

    return router


def add_transaction_routes(app: FastAPI) -> None:
    app.include_router(transaction_routes())
