"""Coordinator app: wiring of settings, pool, store, service and routes;
`magnetar-coordinator`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_runtime.app import create_app
from magnetar_runtime.serve import serve
from magnetar_storage.db import create_pool

from magnetar_coordinator.api import add_routes
from magnetar_coordinator.service import CoordinatorService, new_instance_id
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import CoordinatorStore


def build_app(settings: CoordinatorSettings | None = None) -> FastAPI:
    settings = settings or CoordinatorSettings()
    tcid = settings.resolved_coordinator_id()
    state: dict = {}

    async def lifespan(app: FastAPI):
        pool = await create_pool(settings.database_url, max_size=settings.db_pool_size)
        service = CoordinatorService(CoordinatorStore(pool, tcid, new_instance_id()), settings)
        state["service"] = service
        add_routes(app, service)
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            await pool.close()

    async def ready() -> bool:
        service = state.get("service")
        return bool(service and service.ready)

    return create_app("coordinator", lifespan=lifespan, ready=ready)


def main() -> None:
    settings = CoordinatorSettings()
    serve(build_app(settings), settings, f"coordinator {settings.resolved_coordinator_id()}")


if __name__ == "__main__":
    main()
