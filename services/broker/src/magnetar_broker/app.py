"""Broker app: wiring of settings, pool, store, service and routes; `magnetar-broker`."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_runtime.app import service_app
from magnetar_runtime.serve import serve

from magnetar_broker.api import add_routes
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore


def build_app(settings: BrokerSettings | None = None) -> FastAPI:
    settings = settings or BrokerSettings()
    return service_app(
        "broker", settings,
        lambda pool, auth: BrokerService(BrokerStore(pool, settings.resolved_broker_id), settings, auth),
        add_routes)


def main() -> None:
    settings = BrokerSettings()
    serve(build_app(settings), settings, f"broker {settings.resolved_broker_id}")


if __name__ == "__main__":
    main()
