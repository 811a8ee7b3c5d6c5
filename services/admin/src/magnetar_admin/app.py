"""Admin app: wiring of settings, pool, store, service and routes; `magnetar-admin-service`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_runtime.app import create_app
from magnetar_runtime.serve import serve
from magnetar_storage.db import create_pool

from magnetar_admin.api import add_routes
from magnetar_admin.service import AdminService
from magnetar_admin.settings import AdminSettings
from magnetar_admin.store import AdminStore


def build_app(settings: AdminSettings | None = None) -> FastAPI:
    settings = settings or AdminSettings()
    state: dict = {}

    async def lifespan(app: FastAPI):
        pool = await create_pool(settings.database_url, max_size=settings.db_pool_size)
        service = AdminService(AdminStore(pool, settings.lease_ttl_ms / 1000),
                               settings.service_request_timeout_ms / 1000)
        await service.start()
        state["service"] = service
        try:
            yield
        finally:
            await service.stop()
            await pool.close()

    async def ready() -> bool:
        return "service" in state

    app = create_app("admin", lifespan=lifespan, ready=ready)

    # Routes are declared up front (OpenAPI sees them) and reach the service late.
    class _Late:
        def __getattr__(self, item):
            return getattr(state["service"], item)

    add_routes(app, _Late())
    return app


def main() -> None:
    settings = AdminSettings()
    serve(build_app(settings), settings, "admin")


if __name__ == "__main__":
    main()
