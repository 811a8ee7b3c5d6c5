"""Issue #27: brokers SIGKILLed in the middle of dead-letter moves, at each instruction
that matters (failpoints): before the move's SQL transaction commits, after it commits
and before the destination answers, and on the source after the answer but before its
memory has the acknowledgements.  At every death, and at the end, every message is in
exactly one place: unacknowledged on the source subscription, or once in the
dead-letter topic (counted in one snapshot of the database)."""

from __future__ import annotations

import threading

import pytest

import magnetar
from magnetar_broker.ownership import rendezvous
from magnetar_broker.subscription.deadrules import origin_message_id
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.cursorstate import decode_acks
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

FAILPOINTS = ["broker.dead_letter_before_commit", "broker.dead_letter_after_commit", "broker.dead_letter_moved"]
BROKERS = ["broker-0", "broker-1"]


def topic_on(broker: str, prefix: str) -> str:
    """A topic name that rendezvous hashing gives to ``broker`` while both are alive, so
    the source and its dead-letter topic start on different brokers (the move crosses)."""
    for i in range(1000):
        name = f"persistent://public/default/{prefix}-{i}"
        if rendezvous(name, [(b, "") for b in BROKERS])[0] == broker:
            return name
    raise AssertionError("no name found")


SNAPSHOT = """
SELECT (SELECT s.mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id)
        WHERE t.topic = $1 AND s.subscription = 's') AS mark_delete,
       (SELECT s.acked_state FROM subscriptions s JOIN topics t USING (topic_id)
        WHERE t.topic = $1 AND s.subscription = 's') AS acked_state,
       ARRAY(SELECT e.entry_id::text || ':' || e.num_messages::text FROM entries e JOIN topics t USING (topic_id)
             WHERE t.topic = $1 ORDER BY e.entry_id) AS source,
       ARRAY(SELECT e.payload FROM entries e JOIN topics t USING (topic_id)
             WHERE t.topic = $2 ORDER BY e.entry_id) AS dead
"""


def places(cluster, source: str, dlq: str) -> tuple[int, int, int]:
    """(messages still on the source, messages in the DLQ, messages in both or in neither
    or twice in the DLQ), read in one statement (one snapshot)."""
    [row] = cluster.query(SNAPSHOT, source, dlq)
    mark = row["mark_delete"] if row["mark_delete"] is not None else -1
    acks = decode_acks(bytes(row["acked_state"] or b""))
    copies: list[str] = []
    for payload in row["dead"]:
        copies += [m.properties["ORIGIN_MESSAGE_ID"] for m in pb.MessageBatch.FromString(payload).messages]
    wrong = len(copies) - len(set(copies))  # a message twice in the DLQ
    on_source = 0
    for item in row["source"]:
        entry, size = map(int, item.split(":"))
        for index in range(size):
            mask = acks.get(entry, 0)
            acked = entry <= mark or mask == -1 or bool(mask >> index & 1)
            in_dlq = origin_message_id(entry, -1, index, size) in copies
            on_source += not acked
            wrong += acked != in_dlq  # acknowledged without its copy, or a copy of one still here
    return on_source, len(set(copies)), wrong


@pytest.mark.cluster(brokers=2)
def test_sigkill_in_the_middle_of_dead_letter_moves_leaves_each_message_in_one_place(cluster):
    source, dlq = topic_on("broker-0", "crash-dlq-src"), topic_on("broker-1", "crash-dlq-dead")
    client = magnetar.Client(",".join(cluster.broker_urls))
    stop = threading.Event()
    sent = 0

    def fail_everything() -> None:
        """The consumer fails every message: each is moved after its second delivery."""
        consumer = client.subscribe(source, "s", consumer_type=magnetar.ConsumerType.Shared,
                                    initial_position=magnetar.InitialPosition.Earliest,
                                    negative_ack_redelivery_delay_ms=50,
                                    dead_letter_policy=magnetar.ConsumerDeadLetterPolicy(1, dead_letter_topic=dlq))
        while not stop.is_set():
            try:
                consumer.negative_acknowledge(consumer.receive(timeout_millis=200))
            except (magnetar.Timeout, magnetar.AlreadyClosed):
                continue

    try:
        producer = client.create_producer(source, batching_max_messages=4)
        worker = threading.Thread(target=fail_everything, daemon=True)
        worker.start()
        deaths = []
        for failpoint in FAILPOINTS:
            for broker in BROKERS:  # whichever does that step of the next move dies there
                cluster.restart(broker, extra_env={"MAGNETAR_FAILPOINTS": failpoint})
            for i in range(8):
                producer.send_async(f"m{sent + i}".encode(), None)
            producer.flush()
            sent += 8
            dead = wait_until(lambda: [b for b in BROKERS if not cluster.services[b].alive], 60,
                              f"a broker killed by its failpoint {failpoint}",
                              explain=lambda: cluster.log_tail("broker-0") + cluster.log_tail("broker-1"))
            deaths.append((failpoint, dead))
            on_source, in_dlq, wrong = places(cluster, source, dlq)
            assert wrong == 0 and on_source + in_dlq == sent, (failpoint, on_source, in_dlq, wrong)
            for broker in BROKERS:
                cluster.restart(broker)  # without the failpoint
        assert len(deaths) == len(FAILPOINTS)
        wait_until(lambda: places(cluster, source, dlq) == (0, sent, 0), 60,
                   "every message moved to the dead-letter topic, once",
                   explain=lambda: str(places(cluster, source, dlq)))
    finally:
        stop.set()
        client.close()
