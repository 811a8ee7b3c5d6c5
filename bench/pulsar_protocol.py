"""The `pulsar-client` wheel over Pulsar's protocol vs Magnetar's own client, same cluster,
same run (issue 17; target: the Pulsar path reaches >= 0.8x the Magnetar client's
produce throughput).

A local cluster (1 broker with its Pulsar listener, fsync on); both clients in this
process, one after the other, each round in both orders so neither always runs on a
warmer cache.  Prints per client:
  - produce: msgs/s of send_async at full speed and p99 publish latency (every 100th
    message timed from the call to its receipt);
  - CPU µs per message during the produce, of this process (the client) and the broker,
    and the broker's net of what it spends idle for as long (measured before each round:
    a slower client's messages would otherwise carry more of its background loops);
    per round, Magnetar's broker CPU per message / the wheel's (issue 29's target:
    >= 0.8x; run with --messages 300000 or more, as the OS counts CPU in 10 ms ticks);
  - consume: msgs/s draining the backlog with receive + acknowledge (the subscription is
    made before the produce, at Latest, so it drains exactly that produce);
and the ratios Pulsar / Magnetar.  The wheel's own ceiling is measured in the same run:
the same produce against a stub broker that answers every SEND at once and stores
nothing (tests/unit/pulsar/stub_broker.py), so "pulsar / wheel ceiling" says how much of
the wheel's speed the broker keeps, apart from what the wheel itself costs.

    .venv/bin/python bench/pulsar_protocol.py [--messages 100000] [--size 100] [--rounds 2]
        [--settings default|tuned] [--no-consume]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent))   # the stub broker of the tests
import pulsar  # noqa: E402
from _common import bench_cluster, durable_postgres, report, send_full_speed  # noqa: E402

import magnetar  # noqa: E402
from tests.unit.pulsar.stub_broker import StubBroker  # noqa: E402

# The producers' settings: "default" is each client's own defaults (the wheel: batches of
# up to 1000 messages or 128 KiB, 10 ms delay, 1000 pending; Magnetar's: 1000, 1 ms,
# 1000), as an application that sets nothing gets; "tuned" is bench/produce.py's.
SETTINGS = {"default": {}, "tuned": {"batching_max_messages": 1000, "batching_max_publish_delay_ms": 5,
                                     "max_pending_messages": 20000}}


def produce(name: str, client, ok, topic: str, messages: int, size: int, settings: str, broker=None,
            idle_rate: float = 0.0, **options) -> dict:
    """send_async with callbacks at full speed; CPU µs per message of this process (the
    client: its threads included) and of the broker process."""
    producer = client.create_producer(topic, batching_enabled=True, **SETTINGS[settings], **options)
    cpu_client = time.process_time()
    cpu_broker = _cpu(broker)
    started = time.perf_counter()
    figures = send_full_speed(producer, messages, size, ok)
    elapsed = time.perf_counter() - started
    figures["client_cpu_us_per_msg"] = round((time.process_time() - cpu_client) / messages * 1e6, 1)
    if broker is not None:
        spent = _cpu(broker) - cpu_broker
        figures["broker_cpu_us_per_msg"] = round(spent / messages * 1e6, 2)
        # Net of what the idle broker spends in as long (its background loops): a
        # slower client's messages would otherwise carry more of it.
        figures["broker_net_cpu_us_per_msg"] = round((spent - idle_rate * elapsed) / messages * 1e6, 2)
    producer.close()
    return figures


def idle_cpu_rate(proc, seconds: float = 3.0) -> float:
    """CPU seconds per second the broker spends with no client sending."""
    before = _cpu(proc)
    time.sleep(seconds)
    return (_cpu(proc) - before) / seconds


def _cpu(proc) -> float:
    if proc is None:
        return 0.0
    times = proc.cpu_times()
    return times.user + times.system


def consume(name: str, client, topic: str, messages: int, **options) -> dict:
    consumer = client.subscribe(topic, f"bench-{name}", receiver_queue_size=5000, **options)
    started = time.perf_counter()
    for received in range(messages):
        try:
            message = consumer.receive(timeout_millis=30000)
        except Exception as exc:
            raise SystemExit(f"{name}: consume stalled after {received} of {messages} messages: {exc!r}") from None
        consumer.acknowledge(message)
    elapsed = time.perf_counter() - started
    consumer.close()
    return {"msgs_per_s": round(messages / elapsed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", choices=sorted(SETTINGS), default="default",
                        help="producer settings of both clients (default: each client's own defaults)")
    parser.add_argument("--consume", action=argparse.BooleanOptionalAction, default=True,
                        help="also drain each topic (--no-consume: produce figures only)")
    args = parser.parse_args()

    with durable_postgres() as url, bench_cluster(url) as cluster:
        import psutil

        broker = psutil.Process(cluster.services["broker-0"].process.pid)
        m_client = magnetar.Client(cluster.service_url)
        p_client = pulsar.Client(cluster.pulsar_service_url, operation_timeout_seconds=60)
        def run(name: str, client, ok, topic: str, **options) -> tuple[dict, dict]:
            if args.consume:
                # The subscription exists before the produce (both clients' default
                # initial position is Latest), so the consume drains exactly what it sent.
                client.subscribe(topic, f"bench-{name}").close()
            produced = produce(name, client, ok, topic, args.messages, args.size, args.settings, broker,
                               idle_rate, **options)
            return produced, consume(name, client, topic, args.messages) if args.consume else {}

        runs = {
            "magnetar": lambda topic: run("magnetar", m_client, magnetar.Result.Ok, topic),
            "pulsar": lambda topic: run("pulsar", p_client, pulsar.Result.Ok, topic, block_if_queue_full=True),
        }
        results: dict[str, list] = {"magnetar": [], "pulsar": [], "stub": []}
        topics = (f"persistent://public/default/bench-pulsar-{i}" for i in itertools.count())
        idle_rate = 0.0
        for round_ in range(args.rounds):
            idle_rate = idle_cpu_rate(broker)
            print(f"  round {round_ + 1} idle broker CPU {idle_rate * 1e3:.1f} ms/s", flush=True)
            order = ["magnetar", "pulsar"] if round_ % 2 == 0 else ["pulsar", "magnetar"]
            for name in order:
                produced, consumed = runs[name](next(topics))
                print(f"  round {round_ + 1} {name:<8} produce {produced['msgs_per_s']:>8,} msgs/s "
                      f"p99 {produced['p99_publish_ms']} ms, CPU µs/msg client {produced['client_cpu_us_per_msg']} "
                      f"broker {produced['broker_cpu_us_per_msg']} "
                      f"(net of idle {produced['broker_net_cpu_us_per_msg']}); "
                      f"consume {consumed.get('msgs_per_s', 0):>8,} msgs/s",
                      flush=True)
                results[name].append((produced, consumed))
            with StubBroker() as stub:
                s_client = pulsar.Client(stub.url, operation_timeout_seconds=60)
                produced = produce("stub", s_client, pulsar.Result.Ok, next(topics), args.messages, args.size,
                                   args.settings, block_if_queue_full=True)
                s_client.close()
            print(f"  round {round_ + 1} wheel ceiling (stub broker) produce {produced['msgs_per_s']:>8,} msgs/s",
                  flush=True)
            results["stub"].append((produced, None))
        p_client.close()
        m_client.close()

    def best(name: str, part: int, key: str) -> float:
        values = [r[part][key] for r in results[name]]
        return max(values) if key == "msgs_per_s" else min(values)

    figures = {"messages": args.messages, "size": args.size, "rounds": args.rounds, "settings": args.settings}
    for name in ("magnetar", "pulsar"):
        figures[f"{name}_produce_msgs_per_s"] = best(name, 0, "msgs_per_s")
        figures[f"{name}_produce_p99_ms"] = best(name, 0, "p99_publish_ms")
        if args.consume:
            figures[f"{name}_consume_msgs_per_s"] = best(name, 1, "msgs_per_s")
        for key in ("client_cpu_us_per_msg", "broker_cpu_us_per_msg", "broker_net_cpu_us_per_msg"):
            figures[f"{name}_produce_{key}"] = min(r[0][key] for r in results[name])
    figures["wheel_ceiling_produce_msgs_per_s"] = best("stub", 0, "msgs_per_s")
    figures["produce_ratio_pulsar_over_wheel_ceiling"] = round(
        figures["pulsar_produce_msgs_per_s"] / figures["wheel_ceiling_produce_msgs_per_s"], 2)
    figures["produce_ratio_pulsar_over_magnetar"] = round(
        figures["pulsar_produce_msgs_per_s"] / figures["magnetar_produce_msgs_per_s"], 2)
    if args.consume:
        figures["consume_ratio_pulsar_over_magnetar"] = round(
            figures["pulsar_consume_msgs_per_s"] / figures["magnetar_consume_msgs_per_s"], 2)
    figures["produce_ratio_per_round"] = [round(p[0]["msgs_per_s"] / m[0]["msgs_per_s"], 2)
                                          for p, m in zip(results["pulsar"], results["magnetar"])]
    # Issue 29's target: the broker's CPU per Pulsar message >= 0.8x the Magnetar path's,
    # i.e. Magnetar's CPU per message / Pulsar's, round by round (same load).
    for key in ("broker_cpu_us_per_msg", "broker_net_cpu_us_per_msg"):
        figures[f"{key.removesuffix('_us_per_msg')}_ratio_magnetar_over_pulsar_per_round"] = [
            round(m[0][key] / p[0][key], 2) if p[0][key] > 0 else None
            for p, m in zip(results["pulsar"], results["magnetar"])]
    report("Pulsar protocol (pulsar-client wheel) vs Magnetar client, best of rounds", figures)


if __name__ == "__main__":
    main()
