"""Run a service app under uvicorn; SIGTERM/SIGINT shut it down gracefully (the
app's lifespan ``finally`` runs: brokers release leases, loops stop)."""

from __future__ import annotations

import gc

import uvicorn

from magnetar_runtime.app import FastPath
from magnetar_runtime.logs import configure_logging
from magnetar_runtime.settings import ServiceSettings


def serve(app, settings: ServiceSettings, service: str) -> None:
    configure_logging(settings.log_level, settings.log_format, service)
    # Fewer, cheaper collections: the hot paths allocate many short-lived objects, and a
    # full collection over every long-lived module object shows up as tail latency.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    config = uvicorn.Config(
        FastPath(app),  # protobuf routes skip the middleware stack (app.py)
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
        # A broker holds long-poll fetches open; keep idle connections long enough.
        timeout_keep_alive=75,
        # Services are reached directly (or through a Kubernetes Service), not through
        # proxies whose X-Forwarded-* headers they would need to trust.
        proxy_headers=False,
    )
    uvicorn.Server(config).run()
