import asyncio
import logging

import pytest

from magnetar_runtime.groupcommit import GroupCommit
from magnetar_runtime.loops import BackgroundLoop
from magnetar_runtime.tasks import TaskSet
from magnetar_storage.queries import parse_queries


async def test_group_commit_batches_concurrent_callers():
    groups = []

    async def commit(items):
        groups.append(list(items))
        await asyncio.sleep(0)
        return [i * 10 for i in items]

    gc = GroupCommit(commit, max_items=100)
    results = await asyncio.gather(*(gc.submit(i) for i in range(5)))
    assert results == [0, 10, 20, 30, 40]
    assert groups == [[0, 1, 2, 3, 4]]


async def test_group_commit_failure_reaches_every_caller():
    async def commit(items):
        raise RuntimeError("db down")

    gc = GroupCommit(commit)
    futs = [gc.submit(i) for i in range(3)]
    for fut in futs:
        with pytest.raises(RuntimeError):
            await fut
    await asyncio.wait_for(gc.idle(), 1)


async def test_group_commit_runs_up_to_max_in_flight_groups_at_once():
    """With two in flight, a caller arriving while one commit runs goes at once, alone;
    callers arriving while two run wait and then share the next commit."""
    release = asyncio.Event()
    groups: list[list[int]] = []

    async def commit(items):
        groups.append(list(items))
        await release.wait()
        return items

    gc = GroupCommit(commit, max_in_flight=2)
    first = gc.submit(1)
    await asyncio.sleep(0)
    second = gc.submit(2)
    await asyncio.sleep(0)
    later = [gc.submit(3), gc.submit(4)]
    await asyncio.sleep(0)
    assert groups == [[1], [2]]  # two commits running, 3 and 4 queued
    release.set()
    assert await asyncio.gather(first, second, *later) == [1, 2, 3, 4]
    assert groups == [[1], [2], [3, 4]]
    await asyncio.wait_for(gc.idle(), 1)


async def test_a_held_writer_commits_nothing_until_let_go():
    """A one-phase commit holds a partition's writer while it writes that partition's
    rows in its own SQL transaction: no group may be written meanwhile."""
    committed: list[list[int]] = []

    async def commit(items):
        committed.append(items)
        return items

    gc = GroupCommit(commit)
    async with gc.hold():
        waiting = gc.submit(1)
        for _ in range(5):
            await asyncio.sleep(0)
        assert committed == [] and not waiting.done()
    assert await waiting == 1
    assert committed == [[1]]
    with pytest.raises(RuntimeError):
        GroupCommit(commit, max_in_flight=2).hold()  # concurrent groups: nothing to hold


async def test_loop_survives_a_failing_iteration():
    calls = []
    done = asyncio.Event()

    async def once():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("passing error")
        done.set()

    loop = BackgroundLoop("t", 0.01, once)
    loop.start()
    await asyncio.wait_for(done.wait(), 5)
    await loop.stop()
    assert len(calls) >= 2


def test_named_queries():
    q = parse_queries("-- name: a\nSELECT 1;\n\n-- name: b\nSELECT 2\n")
    assert q == {"a": "SELECT 1", "b": "SELECT 2"}
    with pytest.raises(ValueError):
        parse_queries("-- name: a\nx\n-- name: a\ny")


async def test_a_task_set_holds_its_tasks_until_done_and_logs_a_failure(caplog):
    tasks = TaskSet("owner", logging.getLogger("test.tasks"))
    release = asyncio.Event()

    async def waits():
        await release.wait()

    async def fails():
        raise RuntimeError("boom")

    held = tasks.spawn(waits())
    tasks.spawn(fails())
    for _ in range(2):  # the task runs, then its done-callback
        await asyncio.sleep(0)
    assert list(tasks) == [held]  # the failed one is let go; the running one is held
    assert "owner: background task" in caplog.text and "boom" in caplog.text
    release.set()
    await held
    assert len(tasks) == 0
