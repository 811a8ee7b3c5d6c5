"""Broker app: wiring of settings, pool, store, service and routes; `magnetar-broker`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_broker import hosted_coordinator
from magnetar_broker.api import add_routes
from magnetar_broker.pulsar.server import PulsarServer
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_runtime.app import service_app
from magnetar_runtime.serve import serve


def build_app(settings: BrokerSettings | None = None) -> FastAPI:
    settings = settings or BrokerSettings()

    routes = hosted_coordinator.add_routes if settings.host_coordinator else add_routes

    def make_service(pool, auth) -> BrokerService | hosted_coordinator.BrokerWithCoordinator:
        service: BrokerService | hosted_coordinator.BrokerWithCoordinator
        service = BrokerService(BrokerStore(pool, settings.resolved_broker_id), settings, auth)
        if settings.pulsar_port:
            service.front_ends.append(PulsarServer(service, settings))
        if settings.host_coordinator:
            service = hosted_coordinator.BrokerWithCoordinator.build(service, pool, auth)
        # On SIGTERM, before open requests (long polls) are waited for: see serve.py.
        app.state.on_shutdown = service.release_leases
        return service

    app = service_app("broker", settings, make_service, routes)
    return app


def main() -> None:
    settings = BrokerSettings()
    hosted = " with its coordinator" if settings.host_coordinator else ""
    serve(build_app(settings), settings, f"broker {settings.resolved_broker_id}{hosted}")


if __name__ == "__main__":
    main()
