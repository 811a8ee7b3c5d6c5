"""Leader election with a WaitForExclusive producer (PIP-68).

Run several copies; the one that gets the producer is the leader.  It replays the topic
with a reader to rebuild its state (here: a counter), then appends.  Kill the leader and
the next copy takes over; a frozen former leader is fenced on its first send.

    .venv/bin/python examples/leader_election.py NAME [--service-url URL] [--rounds N]
"""

import argparse
import time

import magnetar

TOPIC = "leader-election-demo"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--service-url", default="http://localhost:8080")
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument("--rounds", type=int, default=0, help="stop after N appends (0: run forever)")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    client = magnetar.Client(args.service_url)
    print(f"{args.name}: waiting to become the leader", flush=True)
    producer = client.create_producer(args.topic, producer_name=args.name,
                                      access_mode=magnetar.ProducerAccessMode.WaitForExclusive)
    # Leader now: rebuild the state from everything written so far.
    count = 0
    reader = client.create_reader(args.topic, magnetar.MessageId.earliest)
    while reader.has_message_available():
        count = int(reader.read_next(timeout_millis=10000).data().split(b":")[1])
    reader.close()
    print(f"{args.name}: leader, state rebuilt at {count}", flush=True)
    rounds = 0
    try:
        while args.rounds == 0 or rounds < args.rounds:
            count += 1
            producer.send(f"{args.name}:{count}".encode())
            print(f"{args.name}: wrote {count}", flush=True)
            rounds += 1
            time.sleep(args.interval)
    except magnetar.ProducerFenced:
        print(f"{args.name}: fenced, no longer the leader", flush=True)
    finally:
        client.close()


if __name__ == "__main__":
    main()
