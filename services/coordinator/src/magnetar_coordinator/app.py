"""Coordinator app: wiring of settings, pool, store, service and routes;
`magnetar-coordinator`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_coordinator.api import add_routes
from magnetar_coordinator.service import CoordinatorService, new_instance_id
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import CoordinatorStore
from magnetar_runtime.app import service_app
from magnetar_runtime.serve import serve


def build_app(settings: CoordinatorSettings | None = None) -> FastAPI:
    settings = settings or CoordinatorSettings()
    tcid = settings.resolved_coordinator_id()
    return service_app(
        "coordinator", settings,
        lambda pool, auth: CoordinatorService(
            CoordinatorStore(pool, tcid, new_instance_id()), settings, auth),
        add_routes)


def main() -> None:
    settings = CoordinatorSettings()
    serve(build_app(settings), settings, f"coordinator {settings.resolved_coordinator_id()}")


if __name__ == "__main__":
    main()
