"""/admin/v2/transactions/transaction-keys (seed 000): list (paginated, filterable by
owner), get and delete transaction keys.  A superuser sees every owner's keys; another
role sees and deletes only its own.  A key name may hold '/', spaces or unicode: send it
URL-encoded."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from fastapi import APIRouter, FastAPI, Query, Request

from magnetar_admin.deps import Service
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import AuthorizationError, BadRequest, ServiceNotReady, TransactionKeyNotFound
from magnetar_protocol.keys import identity, key_problem
from magnetar_protocol.txnid import TxnID
from magnetar_protocol.validate import check_text
from magnetar_runtime.auth import current_role

PATH = "/admin/v2/transactions/transaction-keys"


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def key_json(row) -> dict:
    return {"owner": row["owner"], "transactionKey": row["transaction_key"], "epoch": row["epoch"],
            "coordinatorId": row["coordinator_id"], "transactions": list(row["transactions"]),
            "createdAt": _ms(row["created_at"]), "lastActiveAt": _ms(row["last_active_at"]),
            "ageMs": int(row["age_s"] * 1000), "idleMs": int(row["idle_s"] * 1000)}


def _token(owner: str, key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([owner, key]).encode()).decode()


def _untoken(token: str) -> tuple[str, str]:
    try:
        owner, key = json.loads(base64.urlsafe_b64decode(token.encode()))
        assert isinstance(owner, str) and isinstance(key, str)
        return check_text("pageToken", owner), check_text("pageToken", key)
    except Exception:
        raise BadRequest("pageToken is not one this API returned (use nextPageToken as given)") from None


def _owner_for(request: Request, owner: str | None, what: str) -> str | None:
    """The owner a request may look at: a superuser any (None: all), others their own."""
    auth = request.app.state.auth
    role = current_role()
    if auth.roles.is_superuser(role):
        return owner
    if owner not in (None, role):
        raise AuthorizationError(f"{what}: role {role!r} may only see its own keys, not {owner!r}'s")
    return role


def _check_key(key: str) -> str:
    if problem := key_problem(key):
        raise BadRequest(problem)
    return key


def transaction_key_routes() -> APIRouter:
    router = APIRouter(prefix=PATH, tags=["transaction keys"])

    @router.get("", summary="Transaction keys: owner, epoch, coordinator, open transactions, ages")
    async def list_keys(request: Request, service: Service, owner: str | None = None,
                        pageSize: int = Query(100, ge=1, le=1000),  # noqa: N803 (Pulsar's name)
                        pageToken: str | None = None) -> dict:  # noqa: N803
        owner = _owner_for(request, owner, "listing transaction keys")
        after = _untoken(pageToken) if pageToken else (None, None)
        rows = await service.store.transaction_keys(owner, after, pageSize + 1)
        page, more = rows[:pageSize], len(rows) > pageSize
        return {"transactionKeys": [key_json(r) for r in page],
                "nextPageToken": _token(page[-1]["owner"], page[-1]["transaction_key"]) if more else None}

    @router.get("/{key:path}", summary="One transaction key: epoch and its open transactions")
    async def get_key(key: str, request: Request, service: Service, owner: str | None = None) -> dict:
        _check_key(key)
        owner = _owner_for(request, owner, f"reading transaction key {key!r}") or current_role()
        rows = await service.store.transaction_keys(owner, (None, None), 1, key)
        row = rows[0] if rows else None
        if row is None:
            raise TransactionKeyNotFound(f"transaction key {identity(owner, key)!r} does not exist")
        return key_json(row)

    @router.delete("/{key:path}", summary="Abort a key's transactions and delete it (its epoch "
                                          "is kept: a later connect continues from it)")
    async def delete_key(key: str, request: Request, service: Service, owner: str | None = None) -> dict:
        _check_key(key)
        owner = _owner_for(request, owner, f"deleting transaction key {key!r}") or current_role()
        urls = await service.store.live_registries()
        if not urls:
            raise ServiceNotReady("no transaction-key registry is running; start magnetar-registry")
        reply = await service.rpc.call(urls[0], "/v1/keys/delete",
                                       pb.DeleteKeyRequest(owner=owner, transaction_key=key),
                                       pb.DeleteKeyResponse)
        return {"owner": owner, "transactionKey": key,
                "abortedTransactions": [str(TxnID.from_wire(t)) for t in reply.aborted]}

    return router


def add_transaction_key_routes(app: FastAPI) -> None:
    app.include_router(transaction_key_routes())
