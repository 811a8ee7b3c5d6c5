"""Admin app: wiring of settings, pool, store, service and routes; `magnetar-admin-service`.

Every error answer is JSON ``{"reason", "code"}``: Magnetar errors through the shared
runtime, and here also FastAPI's validation errors (400, not 422), unknown paths, and
database failures (409 for a constraint a concurrent change broke, 503 when the
database is unreachable).
"""

from __future__ import annotations

import logging

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from magnetar_admin.api import add_routes
from magnetar_admin.api_kubernetes import add_kubernetes_routes
from magnetar_admin.api_transaction_keys import add_transaction_key_routes
from magnetar_admin.api_transactions import add_transaction_routes
from magnetar_admin.service import AdminService
from magnetar_admin.settings import AdminSettings
from magnetar_admin.store import AdminStore
from magnetar_protocol.errors import (
    AuthorizationError,
    BadRequest,
    Conflict,
    PersistenceError,
    UnknownError,
)
from magnetar_runtime.app import create_app
from magnetar_runtime.auth import Authenticator
from magnetar_runtime.error_answers import error_response, refused_data
from magnetar_runtime.serve import serve
from magnetar_storage.db import create_pool

log = logging.getLogger("magnetar.admin")


def build_app(settings: AdminSettings | None = None) -> FastAPI:
    settings = settings or AdminSettings()

    async def lifespan(app: FastAPI):
        pool = await create_pool(settings.database_url, max_size=settings.db_pool_size)
        service = AdminService(AdminStore(pool, settings.lease_ttl_ms / 1000), settings, auth)
        await service.start()
        app.state.service = service
        try:
            yield
        finally:
            app.state.service = None
            await service.stop()
            await pool.close()

    async def ready() -> bool:
        service = getattr(app.state, "service", None)
        return service is not None and await service.store.ping()

    auth = Authenticator(settings)
    auth.path_rule = admin_path_rule
    app = create_app("admin", lifespan=lifespan, ready=ready, auth=auth)
    app.state.service = None
    add_routes(app, settings.cluster_name)
    add_transaction_routes(app)
    add_transaction_key_routes(app)
    add_kubernetes_routes(app)
    add_error_handlers(app)
    return app


# Endpoints a non-superuser may call (they check ownership, or tenant admin roles,
# themselves: api.tenant_admin_only); every other admin endpoint needs a superuser role
# when authentication is on.
OWNER_PATHS = ("/admin/v2/transactions/transaction-keys", "/admin/v3/transactions/abortTransaction/",
               "/admin/v2/namespaces/", "/admin/v2/persistent/")


def admin_path_rule(auth: Authenticator, path: str, role: str) -> None:
    if path.startswith(OWNER_PATHS) or auth.roles.is_superuser(role):
        return
    raise AuthorizationError(f"{path} needs a superuser role (MAGNETAR_AUTH_SUPERUSER_ROLES); "
                             f"{role!r} is not one")


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        where = "; ".join(f"{' '.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                          for e in exc.errors())
        return error_response(BadRequest(f"invalid request: {where}"), request)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        code = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        return JSONResponse({"reason": f"{exc.detail}: {request.method} {request.url.path}",
                             "code": code}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(asyncpg.IntegrityConstraintViolationError)
    async def _constraint(request: Request, exc: asyncpg.PostgresError) -> Response:
        return error_response(Conflict(f"a concurrent change got in the way ({exc.__class__.__name__}: "
                                       f"{exc}); look again and retry"), request)

    @app.exception_handler(asyncpg.PostgresError)
    async def _database(request: Request, exc: asyncpg.PostgresError) -> Response:
        if isinstance(exc, (asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError)):
            return error_response(PersistenceError(f"database unavailable: {exc}"), request)
        if isinstance(exc, asyncpg.DataError):  # a value the edge checks let through
            return error_response(refused_data(exc), request)
        log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(UnknownError(f"database error: {exc.__class__.__name__}: {exc}"), request)

    for unavailable in (asyncpg.InterfaceError, OSError, TimeoutError):
        app.add_exception_handler(unavailable, _unavailable)


async def _unavailable(request: Request, exc: Exception) -> Response:
    return error_response(PersistenceError(f"database unavailable: {exc.__class__.__name__}: {exc}"),
                          request)


def main() -> None:
    settings = AdminSettings()
    serve(build_app(settings), settings, "admin")


if __name__ == "__main__":
    main()
