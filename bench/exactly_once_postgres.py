"""What exactly-once into your own PostgreSQL costs (docs/exactly-once-postgres.md): messages
per second of a consumer that updates one balance row per message,

- `dual`: the unsafe dual write: its own SQL commit, then a plain ack (the ceiling here);
- `inbox`: `magnetar.pg`: the row, the ack and the commit decision in one SQL transaction,
  one message per block;
- `inbox x10`: the same with ten messages per block, acknowledged concurrently (the
  remedy for high rates);

alternating rounds in one run on one fsync-on PostgreSQL (the machine is shared and
noisy: a ratio against `dual` within the run, never a figure against another day's).
`db only` is the database alone (the UPDATE and COMMIT, no messaging): the floor of
`dual`'s cost.

    .venv/bin/python bench/exactly_once_postgres.py [--messages 1000] [--rounds 2] [--deployment separate]

`--profile` then measures one more `inbox` round (one message per block) and breaks it
down: the median time of each phase of a block (as the client sees it), the CPU each
process spent per block, and PostgreSQL's own counters per block (SQL transactions,
statements: `_accounting.py`) with the statements that ran most often.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import asyncpg  # noqa: E402
from _accounting import per_transaction as accounting  # noqa: E402
from _accounting import print_accounting, snapshot, top_statements  # noqa: E402
from _common import (  # noqa: E402
    bench_cluster,
    cpu_seconds,
    durable_postgres,
    postmaster_pid,
    report,
)

import magnetar  # noqa: E402
import magnetar.asyncio as aio  # noqa: E402
import magnetar.pg  # noqa: E402

ROLE = "bench_app"
UPDATE = "UPDATE balances SET amount = amount + 1 WHERE account = $1"


async def setup(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", ROLE):
            await conn.execute(f"CREATE ROLE {ROLE} LOGIN")
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("CREATE TABLE balances (account text PRIMARY KEY, amount bigint NOT NULL)")
        await conn.execute("INSERT INTO balances SELECT 'a' || i, 0 FROM generate_series(0, 99) i")
        await conn.execute(f"GRANT USAGE ON SCHEMA public TO {ROLE}")  # bench_cluster re-created it
        await conn.execute(f"GRANT SELECT, UPDATE ON balances TO {ROLE}")
        await conn.execute("SELECT magnetar_app.grant_app_role($1, 'anonymous', true)", ROLE)
    finally:
        await conn.close()
    return url.replace("://magnetar@", f"://{ROLE}@", 1)


async def one_round(service_url: str, app_url: str, mode: str, messages: int, topic: str) -> float:
    client = aio.Client(service_url)
    conn = await asyncpg.connect(app_url)
    try:
        if mode == "db only":
            started = time.perf_counter()
            for i in range(messages):
                async with conn.transaction():
                    await conn.execute(UPDATE, f"a{i % 100}")
            return messages / (time.perf_counter() - started)
        producer = await client.create_producer(topic, batching_max_messages=1000)
        await asyncio.gather(*(producer.send(b"a%d" % (i % 100)) for i in range(messages)))
        consumer = await client.subscribe(topic, "bench", consumer_type=magnetar.ConsumerType.Shared,
                                          initial_position=magnetar.InitialPosition.Earliest)
        per_block = 10 if mode == "inbox x10" else 1
        started = time.perf_counter()
        for _ in range(0, messages, per_block):
            batch = [await consumer.receive(timeout_millis=30000) for _ in range(per_block)]
            if mode == "dual":
                async with conn.transaction():
                    await conn.execute(UPDATE, batch[0].data().decode())
                await consumer.acknowledge(batch[0])  # a crash just before: applied twice
            else:
                async with magnetar.pg.transaction(conn, client) as tx:
                    for msg in batch:
                        await conn.execute(UPDATE, msg.data().decode())
                    # Concurrent acks of one block share the broker's round trips.
                    await asyncio.gather(*(tx.acknowledge(msg) for msg in batch))
        return messages / (time.perf_counter() - started)
    finally:
        await conn.close()
        await client.close()


# A block's phases, in order, as the client sees them (--profile): what _Core's step
# before each boundary took.
PHASES = ("NewTxn", "UPDATE", "ack (pending)", "settle", "decide + COMMIT", "EndTxn (finish)")


class PhaseClock:
    """Times each phase of magnetar.pg's blocks by wrapping the block's Magnetar steps
    (``_Core``): the gaps between them are the application's UPDATE and the commit
    decision with the SQL COMMIT."""

    def __init__(self) -> None:
        self.took: dict[str, list[float]] = {p: [] for p in PHASES}
        self._last = 0.0
        self._saved: dict[str, object] = {}

    def _mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.took[phase].append(now - self._last)
        self._last = now

    def __enter__(self) -> PhaseClock:
        core = magnetar.pg._Core
        self._saved = {n: getattr(core, n) for n in ("begin", "acknowledge", "settle", "committed")}
        clock, saved = self, self._saved

        async def begin(this):
            clock._last = time.perf_counter()
            await saved["begin"](this)
            clock._mark("NewTxn")

        async def acknowledge(this, *a, **k):
            clock._mark("UPDATE")
            await saved["acknowledge"](this, *a, **k)
            clock._mark("ack (pending)")

        async def settle(this):
            result = await saved["settle"](this)
            clock._mark("settle")
            return result

        async def committed(this):
            clock._mark("decide + COMMIT")
            await saved["committed"](this)
            clock._mark("EndTxn (finish)")

        for name, fn in (("begin", begin), ("acknowledge", acknowledge), ("settle", settle),
                         ("committed", committed)):
            setattr(core, name, fn)
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self._saved.items():
            setattr(magnetar.pg._Core, name, fn)


def profile(cluster, url: str, app_url: str, messages: int) -> None:
    """One more `inbox` round, broken down by phase, process CPU and SQL counters."""
    sessions = {name: svc.pid for name, svc in cluster.services.items() if svc.pid}
    postmaster = asyncio.run(postmaster_pid(url))

    async def reset_statements() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SELECT pg_stat_statements_reset()")
        finally:
            await conn.close()

    asyncio.run(reset_statements())  # first: the counters' statement count starts here too
    counters = asyncio.run(snapshot(url))
    cpu_before = cpu_seconds(sessions, postmaster)
    with PhaseClock() as clock:
        rate = asyncio.run(one_round(cluster.service_url, app_url, "inbox", messages, "orders-profile"))
    cpu_after = cpu_seconds(sessions, postmaster)
    account = accounting(counters, asyncio.run(snapshot(url)), messages)
    blocks = len(clock.took["EndTxn (finish)"])
    print(f"\n== profile: {blocks} one-message blocks at {rate:.0f} msg/s "
          "(the producer's and consumer's setup included in the CPU and counters)")
    for phase in PHASES:
        took = clock.took[phase]
        print(f"  {phase:<18} p50 {statistics.median(took) * 1000:6.2f} ms   "
              f"mean {statistics.fmean(took) * 1000:6.2f} ms")
    total = sum(statistics.fmean(t) for t in clock.took.values())
    print(f"  {'block (sum of means)':<18} {total * 1000:6.2f} ms")
    print("  CPU per block: " + ", ".join(
        f"{name} {(cpu_after[name] - cpu_before.get(name, 0)) * 1000 / blocks:.2f} ms"
        for name in cpu_after))
    print_accounting("profile", {"inbox": account})
    print("  statements by calls (calls per block, mean ms):")
    for r in asyncio.run(top_statements(url, "calls", limit=12, width=110)):
        print(f"    {r['calls'] / blocks:6.2f}  {r['exec_ms'] / max(r['calls'], 1):6.3f}  {r['query']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--deployment", choices=["hosted", "separate"], default="hosted",
                        help="coordinator hosted by the broker (one-phase ends) or its own process")
    parser.add_argument("--profile", action="store_true",
                        help="then break one more inbox round down by phase, CPU and SQL counters")
    args = parser.parse_args()
    modes = ["db only", "dual", "inbox", "inbox x10"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with durable_postgres(shared_preload_libraries="pg_stat_statements") as url, bench_cluster(
            url, brokers=1, coordinators=int(args.deployment == "separate"),
            coordinator_in_broker=args.deployment == "hosted") as cluster:
        app_url = asyncio.run(setup(url))
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else reversed(modes):  # alternate the order
                topic = f"orders-{mode.replace(' ', '-')}-{r}"
                rate = asyncio.run(one_round(cluster.service_url, app_url, mode, args.messages, topic))
                rates[mode].append(rate)
                print(f"round {r} {mode:<10} {rate:8.0f} msg/s", flush=True)
        if args.profile:
            profile(cluster, url, app_url, args.messages)
    if not args.rounds:
        return
    dual = statistics.median(rates["dual"])
    figures = {f"{m} msg/s (median)": round(statistics.median(v)) for m, v in rates.items()}
    figures |= {f"{m} / dual": round(statistics.median(v) / dual, 2) for m, v in rates.items() if m != "dual"}
    report(f"exactly-once into PostgreSQL ({args.deployment}): {args.messages} messages x "
           f"{args.rounds} rounds", figures)


if __name__ == "__main__":
    main()
