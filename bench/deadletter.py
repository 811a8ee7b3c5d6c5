"""The cost of a dead-letter move against a plain acknowledgement, in the same run.

Each round, on a topic of its own, a Shared consumer receives N messages and has them
all redelivered (they come back with redelivery count 1); then, timed, it receives them again and
either acknowledges them ("ack") or nacks them again, which, with
ConsumerDeadLetterPolicy(max_redeliver_count=1), makes the broker move each to the
dead-letter topic: the copy and the acknowledgement in one SQL transaction ("move").
The timed phase ends when the source subscription's cursor is past every message (and,
for "move", every copy is in the DLQ).  Broker and PostgreSQL CPU over the phase too.

    .venv/bin/python bench/deadletter.py [--messages 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).parent))
from _common import bench_cluster, cpu_seconds, durable_postgres, postmaster_pid, report  # noqa: E402

import magnetar  # noqa: E402

DONE = """
SELECT (SELECT s.mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id)
        WHERE t.topic = $1 AND s.subscription = 's') AS mark,
       (SELECT max(e.entry_id) FROM entries e JOIN topics t USING (topic_id) WHERE t.topic = $1) AS last,
       (SELECT coalesce(sum(e.num_messages), 0) FROM entries e JOIN topics t USING (topic_id)
        WHERE t.topic = $2) AS moved
"""


def progress(url: str, topic: str) -> tuple[int, int, int]:
    async def read():
        conn = await asyncpg.connect(url)
        try:
            row = await conn.fetchrow(DONE, f"persistent://public/default/{topic}",
                                      f"persistent://public/default/{topic}-s-DLQ")
            return row["mark"], row["last"], row["moved"]
        finally:
            await conn.close()
    return asyncio.run(read())


def one(client, cluster, url: str, pm: int | None, topic: str, messages: int, move: bool) -> dict:
    policy = magnetar.ConsumerDeadLetterPolicy(max_redeliver_count=1) if move else None
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=magnetar.InitialPosition.Earliest, receiver_queue_size=2000,
                                negative_ack_redelivery_delay_ms=0, dead_letter_policy=policy)
    producer = client.create_producer(topic, batching_max_publish_delay_ms=5, max_pending_messages=20000)
    for _ in range(messages):
        producer.send_async(b"x" * 100, lambda r, m: None)
    producer.flush()
    for _ in range(messages):
        consumer.receive(timeout_millis=60_000)
    consumer.redeliver_unacknowledged_messages()  # all of them again, redelivery count 1
    sessions = {"broker": cluster.services["broker-0"].process.pid}
    before = cpu_seconds(sessions, pm)
    started = time.perf_counter()
    for _ in range(messages):
        msg = consumer.receive(timeout_millis=60_000)
        if move:
            consumer.negative_acknowledge(msg)  # past the limit: moved by the broker
        else:
            consumer.acknowledge(msg)
    while True:
        mark, last, moved = progress(url, topic)
        if mark == last and (not move or moved == messages):
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    after = cpu_seconds(sessions, pm)
    consumer.close()
    producer.close()
    return {"messages": messages, "seconds": round(elapsed, 2), "msgs_per_s": round(messages / elapsed),
            "broker_cpu_us_per_msg": round((after["broker"] - before["broker"]) / messages * 1e6, 1),
            "postgres_cpu_us_per_msg": round((after.get("postgresql", 0) - before.get("postgresql", 0))
                                             / messages * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with durable_postgres() as url, bench_cluster(url) as cluster:
        pm = asyncio.run(postmaster_pid(url))
        client = magnetar.Client(cluster.service_url)
        for r in range(args.rounds):
            ack = one(client, cluster, url, pm, f"ack-{r}", args.messages, move=False)
            move = one(client, cluster, url, pm, f"move-{r}", args.messages, move=True)
            report(f"round {r + 1}: plain ack", ack)
            report(f"round {r + 1}: dead-letter move", move)
            report(f"round {r + 1}: move / ack", {
                "time": round(move["seconds"] / ack["seconds"], 2),
                "broker CPU per message": round(move["broker_cpu_us_per_msg"]
                                                / max(ack["broker_cpu_us_per_msg"], 0.1), 2),
                "PostgreSQL CPU per message": round(move["postgres_cpu_us_per_msg"]
                                                    / max(ack["postgres_cpu_us_per_msg"], 0.1), 2)})
        client.close()


if __name__ == "__main__":
    main()
