"""Broker app: wiring of settings, pool, store, service and routes; `magnetar-broker`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_runtime.app import create_app
from magnetar_runtime.serve import serve
from magnetar_storage.db import create_pool

from magnetar_broker.api import add_routes
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore


def build_app(settings: BrokerSettings | None = None) -> FastAPI:
    settings = settings or BrokerSettings()
    state: dict = {}

    async def lifespan(app: FastAPI):
        pool = await create_pool(settings.database_url, max_size=settings.db_pool_size)
        service = BrokerService(BrokerStore(pool, settings.resolved_broker_id), settings)
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

    return create_app("broker", lifespan=lifespan, ready=ready)


def main() -> None:
    settings = BrokerSettings()
    serve(build_app(settings), settings, f"broker {settings.resolved_broker_id}")


if __name__ == "__main__":
    main()
