"""PartitionLog.lease_checked: a lease-checked write that failed or was fenced stops the
partition being served here (the next request reloads it from the database)."""

from functools import partial
from types import SimpleNamespace

import pytest

from magnetar_broker.partition.log import PartitionLog
from magnetar_protocol.errors import NotOwner


def _log():
    log = SimpleNamespace(closed=False, lost=[], name=SimpleNamespace(full="persistent://t/n/x"))

    def lose(reason):
        log.closed = True
        log.lost.append(reason)

    log.lose = lose
    log.check_open = partial(PartitionLog.check_open, log)
    log.lease_checked = partial(PartitionLog.lease_checked, log)
    return log


async def _returns(value):
    return value


async def _fails():
    raise ConnectionError("server closed the connection")


async def test_an_owned_write_returns_its_result_and_keeps_serving():
    log = _log()
    assert await log.lease_checked("saving", _returns((True, ["answer"])),
                                   owned=lambda r: r[0]) == (True, ["answer"])
    assert not log.closed and log.lost == []


async def test_a_fenced_write_stops_serving_and_raises_not_owner():
    log = _log()
    with pytest.raises(NotOwner, match="no longer served"):
        await log.lease_checked("ending transactions", _returns(False))
    assert log.lost == ["fenced while ending transactions"]


async def test_a_failed_write_stops_serving_and_raises_its_error():
    log = _log()
    with pytest.raises(ConnectionError):
        await log.lease_checked("recording transactional acks", _fails())
    assert log.closed and log.lost[0].startswith("recording transactional acks failed: server closed")
