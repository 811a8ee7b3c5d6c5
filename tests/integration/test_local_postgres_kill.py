"""LocalPostgres.kill() (crash tests): the whole server dies, backends too, so the next
start() finds no process holding the data folder's shared memory."""

from __future__ import annotations

import asyncio

import asyncpg

from magnetar_runtime.local.postgres import LocalPostgres, _alive, _children


def test_kill_takes_the_backends_with_it_and_a_start_at_once_works(tmp_path):
    pg = LocalPostgres(tmp_path / "pg", durable=False).start()
    try:
        async def connect():
            return [await asyncpg.connect(pg.url) for _ in range(3)]

        loop = asyncio.new_event_loop()
        connections = loop.run_until_complete(connect())  # three busy backends
        backends = _children(pg.process.pid)
        assert len(backends) >= 3
        pg.kill()
        assert not [pid for pid in backends if _alive(pid)]
        pg.start()  # at once: nothing holds the old shared memory
        assert loop.run_until_complete(asyncpg.connect(pg.url)) is not None
        for conn in connections:
            conn.terminate()
        loop.close()
    finally:
        pg.stop()
