"""Run a service app under uvicorn; SIGTERM/SIGINT shut it down gracefully.

The order matters for handovers: first the app's ``state.on_shutdown`` (if it set one;
the broker gives its leases back there), then uvicorn stops listening and waits for open
requests (up to ``GRACE_S``), then the app's lifespan ``finally`` runs (loops stop, the
coordinator waits for the commits it is driving).  Without the first step a broker kept
its partitions until its consumers' long polls ended."""

from __future__ import annotations

import asyncio
import gc
import logging

import uvicorn

from magnetar_runtime import tls
from magnetar_runtime.app import FastPath
from magnetar_runtime.httplimits import Limits, bounded_protocol
from magnetar_runtime.logs import configure_logging
from magnetar_runtime.loops import BackgroundLoop
from magnetar_runtime.settings import ServiceSettings

log = logging.getLogger("magnetar.serve")
# uvicorn's wait for open requests; the lifespan's own waits come after it, so the chart's
# terminationGracePeriodSeconds must exceed their sum (charts/magnetar/values.yaml).
GRACE_S = 10


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app, reload_s: float = 10.0) -> None:
        super().__init__(config)
        self._app = app
        watcher = tls.watcher()
        self._cert_loop = None if watcher is None else BackgroundLoop(
            "tls-reload", reload_s, watcher.run_once)

    async def startup(self, sockets=None) -> None:
        if self._cert_loop is not None:
            self._cert_loop.start()
        await super().startup(sockets)

    async def shutdown(self, sockets=None) -> None:
        first = getattr(self._app.state, "on_shutdown", None)
        if first is not None:
            try:
                await asyncio.wait_for(first(), GRACE_S)
            except Exception:  # the lifespan's stop still runs; a lease then lapses on its own
                log.exception("the service's first shutdown step failed")
        await super().shutdown(sockets)
        if self._cert_loop is not None:
            await self._cert_loop.stop()


def http_limits(settings: ServiceSettings) -> Limits:
    return Limits(settings.max_header_bytes, settings.body_limit, settings.header_read_timeout_s,
                  settings.body_read_timeout_s, settings.body_min_bytes_per_s,
                  settings.body_rate_grace_s, settings.max_pending_body_bytes)


def serve(app, settings: ServiceSettings, service: str) -> None:
    configure_logging(settings.log_level, settings.log_format, service)
    # Fewer, cheaper collections: the hot paths allocate many short-lived objects, and a
    # full collection over every long-lived module object shows up as tail latency.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # Before the app: its lifespan (the Pulsar listener, RPC clients) uses the contexts.
    tls.configure(tls.TlsFiles.of(settings))
    server_ssl = tls.server_ssl()
    config = uvicorn.Config(
        FastPath(app),  # protobuf routes skip the middleware stack (app.py)
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # httptools with head, body, read-time and body-memory limits (httplimits.py).
        http=bounded_protocol(http_limits(settings)),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACE_S,
        # A broker holds long-poll fetches open; keep idle connections long enough.
        timeout_keep_alive=75,
        # Services are reached directly (or through a Kubernetes Service), not through
        # proxies whose X-Forwarded-* headers they would need to trust.
        proxy_headers=False,
        # TLS: this process's context (tls.py), so a reloaded certificate reaches new
        # connections.
        ssl_context_factory=(lambda _config, _default: server_ssl) if server_ssl else None,
    )
    _Server(config, app, settings.tls_reload_interval_s).run()
