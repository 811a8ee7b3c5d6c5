"""Registry app: wiring of settings, pool, store, service and routes; `magnetar-registry`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_registry.api import add_routes
from magnetar_registry.service import RegistryService
from magnetar_registry.settings import RegistrySettings
from magnetar_registry.store import RegistryStore
from magnetar_runtime.app import service_app
from magnetar_runtime.serve import serve


def build_app(settings: RegistrySettings | None = None) -> FastAPI:
    settings = settings or RegistrySettings()
    return service_app(
        "registry", settings,
        lambda pool, auth: RegistryService(
            RegistryStore(pool, settings.resolved_registry_id), settings, auth),
        add_routes)


def main() -> None:
    settings = RegistrySettings()
    serve(build_app(settings), settings, f"registry {settings.resolved_registry_id}")


if __name__ == "__main__":
    main()
