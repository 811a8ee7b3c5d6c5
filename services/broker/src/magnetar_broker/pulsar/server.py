"""The Pulsar listener: an asyncio server in the broker process, started and stopped
with the service (``MAGNETAR_PULSAR_PORT``; 0 = none)."""

from __future__ import annotations

import asyncio
import logging

from magnetar_broker.pulsar.connection import Connection
from magnetar_broker.pulsar.consumers import Consumers
from magnetar_broker.pulsar.discovery import Discovery
from magnetar_broker.pulsar.producers import Producers
from magnetar_broker.pulsar.schemas import Schemas
from magnetar_broker.pulsar.transactions import COORDINATOR_TIMEOUT_S, Transactions
from magnetar_runtime import tls
from magnetar_runtime.rpc import RpcClient

log = logging.getLogger("magnetar.broker.pulsar")


def handlers_for(conn: Connection, rpc: RpcClient) -> dict:
    """Every command the listener serves besides CONNECT and PING/PONG, by type."""
    handlers: dict = {}
    for role in (Discovery(conn), Producers(conn), Consumers(conn), Schemas(conn), Transactions(conn, rpc)):
        handlers |= role.handlers()
    return handlers


class PulsarServer:
    def __init__(self, service, settings) -> None:
        self.service = service
        self.settings = settings
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        # Calls to the transaction coordinators, each with its client's token.
        self.rpc = RpcClient(COORDINATOR_TIMEOUT_S)

    async def start(self) -> None:
        # TLS (pulsar+ssl://) with the process's context, which a reloaded certificate
        # updates in place; a plaintext client fails its handshake.
        context = tls.server_ssl()
        self._server = await asyncio.start_server(self._accept, self.settings.host, self.settings.pulsar_port,
                                                  ssl=context)
        log.info("Pulsar protocol listener on %s:%d%s, advertised as %s", self.settings.host,
                 self.settings.pulsar_port, " (TLS)" if context else "", self.settings.pulsar_url)

    async def stop(self) -> None:
        """Stop accepting and close every connection (their sessions close with them)."""
        if self._server is None:
            return
        self._server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.rpc.close()
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # a connection's handler runs as a task
        self._connections.add(task)
        try:
            await Connection(self.service, self.settings, reader, writer,
                             lambda conn: handlers_for(conn, self.rpc)).serve()
        except asyncio.CancelledError:
            pass
        except Exception:   # one connection's bug never reaches the others
            log.exception("pulsar connection failed")
            writer.close()
        finally:
            self._connections.discard(task)
