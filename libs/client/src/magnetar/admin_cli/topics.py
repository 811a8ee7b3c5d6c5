"""``topics ...``: create, list, delete, stats, subscriptions, permissions, and the
backlog operations (create-subscription, skip, clear-backlog, reset-cursor,
peek-messages, get-message-by-id, last-message-id, terminate, compact, compaction-status, unload,
update-partitioned-topic) and a subscription's dead-letter policy."""

from __future__ import annotations

import base64
import time

from magnetar.admin_cli import _grants
from magnetar.admin_cli._http import UsageError, q
from magnetar.admin_cli._names import duration_ms, message_id, name, namespace, topic, topic_path
from magnetar.admin_cli._output import column, key_values, table, timestamp
from magnetar.admin_cli.policies import add_policy_commands, seconds


def _partitions(api, t) -> int:
    return api.request("GET", topic_path(t) + "/partitions")["partitions"]


def group_topics(add) -> None:
    def create(api, out, a) -> None:
        t = topic(a.topic)
        if a.partitions is None:
            api.request("PUT", topic_path(t))
            out.done(f"Created topic {t.full}", topic=t.full, partitions=0)
            return
        if a.partitions < 1:
            raise UsageError(f"--partitions must be at least 1 (got {a.partitions})")
        api.request("PUT", topic_path(t) + "/partitions", a.partitions)
        out.done(f"Created partitioned topic {t.full} with {a.partitions} partitions",
                 topic=t.full, partitions=a.partitions)

    def list_(api, out, a) -> None:
        tenant, ns = namespace(a.namespace)
        suffix = "/partitioned" if a.partitioned else ""
        out.emit(api.request("GET", f"/admin/v2/persistent/{q(tenant)}/{q(ns)}{suffix}"), column("TOPIC"))

    def delete(api, out, a) -> None:
        t = topic(a.topic)
        count = _partitions(api, t)
        api.request("DELETE", topic_path(t) + ("/partitions" if count else ""),
                    query={"force": "true"} if a.force else None)
        out.done(f"Deleted topic {t.full}" + (f" and its {count} partitions" if count else ""),
                 topic=t.full, partitions=count)

    def stats(api, out, a) -> None:
        t = topic(a.topic)
        if _partitions(api, t):
            data = api.request("GET", topic_path(t) + "/partitioned-stats", query={"perPartition": "true"})
        else:
            data = api.request("GET", topic_path(t) + "/stats")
        out.emit(data, lambda d: render_stats(t.full, d))

    def stats_internal(api, out, a) -> None:
        t = topic(a.topic)
        if _partitions(api, t):
            data = api.request("GET", topic_path(t) + "/partitioned-internalStats")
        else:
            data = api.request("GET", topic_path(t) + "/internalStats")
        out.emit(data, lambda d: render_internal(t.full, d))

    def subscriptions(api, out, a) -> None:
        out.emit(api.request("GET", topic_path(topic(a.topic)) + "/subscriptions"), column("SUBSCRIPTION"))

    def unsubscribe(api, out, a) -> None:
        t = topic(a.topic)
        sub = name("subscription", a.subscription)
        api.request("DELETE", topic_path(t) + f"/subscription/{q(sub)}",
                    query={"force": "true"} if a.force else None)
        out.done(f"Deleted subscription {sub} of {t.full}", topic=t.full, subscription=sub)

    def grant(api, out, a) -> None:
        t, acts = topic(a.topic), _grants.actions(a.actions)
        api.request("POST", topic_path(t) + f"/permissions/{q(a.role)}", acts)
        out.done(f"Granted {','.join(acts)} on {t.full} to role {a.role}", topic=t.full,
                 role=a.role, actions=acts)

    def revoke(api, out, a) -> None:
        t = topic(a.topic)
        api.request("DELETE", topic_path(t) + f"/permissions/{q(a.role)}")
        out.done(f"Revoked the permissions of role {a.role} on {t.full}", topic=t.full, role=a.role)

    def permissions(api, out, a) -> None:
        out.emit(api.request("GET", topic_path(topic(a.topic)) + "/permissions"), _grants.render_grants)

    group_backlog(add)
    p = add("create", create, "create a topic (-p N: a partitioned topic)", ("topic",))
    p.add_argument("--partitions", "-p", type=int, help="number of partitions (omit: non-partitioned)")
    p = add("list", list_, "list a namespace's topics (partitions included)", ("namespace",))
    p.add_argument("--partitioned", action="store_true", help="list the partitioned topics only")
    p = add("delete", delete, "delete a topic (a partitioned one with its partitions)", ("topic",))
    p.add_argument("--force", "-f", action="store_true", help="even while clients are connected")
    add("stats", stats, "producers, subscriptions, backlog (summed over partitions)", ("topic",))
    add("stats-internal", stats_internal, "entries, cursors, owner and epochs", ("topic",))
    add("subscriptions", subscriptions, "list a topic's subscriptions", ("topic",))
    p = add("unsubscribe", unsubscribe, "delete a subscription", ("topic",))
    p.add_argument("--subscription", "-s", required=True)
    p.add_argument("--force", "-f", action="store_true", help="even while consumers are connected")
    p = add("grant-permission", grant, "let a role produce and/or consume on one topic", ("topic",))
    p.add_argument("--role", required=True)
    p.add_argument("--actions", required=True, help="produce,consume")
    p = add("revoke-permission", revoke, "take a role's topic grant away", ("topic",))
    p.add_argument("--role", required=True)
    add("permissions", permissions, "list the topic's own grants (namespace grants: "
        "namespaces permissions)", ("topic",))

    def expire(api, out, a) -> None:
        t = topic(a.topic)
        after = seconds(a.time)
        if after < 0:
            raise UsageError("--expireTime must be 0 or more seconds")
        if a.all_subscriptions == (a.subscription is not None):
            raise UsageError("give --subscription SUB or --all-subscriptions (one of them)")
        where = ("/all_subscription" if a.all_subscriptions
                 else f"/subscription/{q(name('subscription', a.subscription))}")
        answer = api.request("POST", topic_path(t) + f"{where}/expireMessages/{after}")
        out.done(f"Expired {answer['expiredEntries']} entries older than {after} s on {t.full}",
                 topic=t.full, **answer)

    p = add("expire-messages", expire, "acknowledge messages older than a time on a subscription (or all)",
            ("topic",))
    p.add_argument("--subscription", "-s")
    p.add_argument("--all-subscriptions", "-a", action="store_true")
    p.add_argument("--expireTime", "-t", dest="time", required=True, help="seconds, or e.g. 1h")
    add_policy_commands(add, "topic", lambda a: topic_path(topic(a.topic)))


def render_stats(full: str, d: dict) -> None:
    partitions = d.get("metadata", {}).get("partitions")
    print(f"Topic {full}" + (f" ({partitions} partitions)" if partitions else
                             f" (owner {d.get('ownerBroker') or 'none'}, "
                             f"{'live' if d.get('liveStats') else 'database-only'} stats)"))
    key_values(d, ["msgInCounter", "bytesInCounter", "msgOutCounter", "storageSize", "backlogSize",
                   "numberOfEntries", "numberOfMessages", "accessMode", "topicEpoch", "exclusiveProducer",
                   "deduplicationStatus"])
    print("\nPublishers")
    table(["NAME", "ID", "ACCESS MODE", "MSG IN"], [
        [p.get("producerName"), p.get("producerId"), p.get("accessMode"), p.get("msgInCounter")]
        for p in d.get("publishers", [])])
    print("\nSubscriptions")
    table(["NAME", "TYPE", "BACKLOG", "UNACKED", "CONSUMERS"], [
        [sub, s.get("type"), s.get("msgBacklog"), s.get("unackedMessages"), len(s.get("consumers", []))]
        for sub, s in d.get("subscriptions", {}).items()])
    if d.get("partitions"):
        print("\nPartitions")
        table(["PARTITION", "OWNER", "ENTRIES", "STORAGE", "PUBLISHERS", "SUBSCRIPTIONS"], [
            [part, p.get("ownerBroker"), p.get("numberOfEntries"), p.get("storageSize"),
             len(p.get("publishers", [])), len(p.get("subscriptions", {}))]
            for part, p in d["partitions"].items()])


def render_internal(full: str, d: dict) -> None:
    if "metadata" in d:
        print(f"Topic {full} ({d['metadata']['partitions']} partitions)")
        table(["PARTITION", "OWNER", "OWNER EPOCH", "ENTRIES", "SIZE", "LAST CONFIRMED", "CURSORS"], [
            [part, p.get("ownerBroker"), p.get("ownerEpoch"), p.get("numberOfEntries"), p.get("totalSize"),
             p.get("lastConfirmedEntry"), len(p.get("cursors", {}))]
            for part, p in d.get("partitions", {}).items()])
        return
    print(f"Topic {full}")
    key_values(d, ["entriesAddedCounter", "numberOfEntries", "numberOfMessages", "totalSize",
                   "lastConfirmedEntry", "state", "ownerBroker", "ownerBrokerUrl", "ownerEpoch", "topicEpoch"])
    print("\nCursors")
    table(["NAME", "MARK DELETE", "INDIVIDUALLY DELETED", "BATCH ACKS"], [
        [sub, c.get("markDeletePosition"), c.get("individuallyDeletedMessages"), c.get("batchDeletedIndexes")]
        for sub, c in d.get("cursors", {}).items()])


def _sub_path(t, sub: str) -> str:
    return topic_path(t) + f"/subscription/{q(sub)}"


def render_messages(messages: list[dict]) -> None:
    for m in messages:
        mid = m["messageId"]
        print(f"Message ID: {mid['ledgerId']}:{mid['entryId']}:{mid['partitionIndex']}:{mid['batchIndex']}")
        key_values({"publishTime": timestamp(m.get("publishTime")), "producerName": m.get("producerName"),
                    "sequenceId": m.get("sequenceId"), "partitionKey": m.get("partitionKey"),
                    "properties": m.get("properties"), "batchSize": m.get("batchSize")})
        if "undecodable" in m:
            print(f"(undecodable: {m['undecodable']})")
        else:
            payload = base64.b64decode(m.get("payload") or "")
            try:
                print(payload.decode("utf-8"))
            except UnicodeDecodeError:
                print(f"({len(payload)} bytes, not UTF-8: --output json gives them in base64)")
        print()


def group_backlog(add) -> None:
    def create_subscription(api, out, a) -> None:
        t, sub = topic(a.topic), name("subscription", a.subscription)
        api.request("PUT", _sub_path(t, sub), message_id(a.messageId))
        out.done(f"Created subscription {sub} on {t.full} at {a.messageId}", topic=t.full, subscription=sub)

    def skip(api, out, a) -> None:
        t, sub = topic(a.topic), name("subscription", a.subscription)
        if a.count < 0:
            raise UsageError(f"-n must be at least 0 (got {a.count})")
        api.request("POST", _sub_path(t, sub) + f"/skip/{a.count}")
        out.done(f"Skipped {a.count} message(s) of {sub} on {t.full} (each partition)", topic=t.full,
                 subscription=sub, skipped=a.count)

    def clear_backlog(api, out, a) -> None:
        t, sub = topic(a.topic), name("subscription", a.subscription)
        api.request("POST", _sub_path(t, sub) + "/skip_all")
        out.done(f"Cleared the backlog of {sub} on {t.full}", topic=t.full, subscription=sub)

    def reset_cursor(api, out, a) -> None:
        t, sub = topic(a.topic), name("subscription", a.subscription)
        if (a.time is None) == (a.messageId is None):
            raise UsageError("give exactly one of -t TIME (how long ago: 10m, 2h, 1d) and -m MESSAGE_ID")
        if a.time is not None:
            ms = int(time.time() * 1000) - duration_ms(a.time)
            api.request("POST", _sub_path(t, sub) + f"/resetcursor/{ms}")
            out.done(f"Reset {sub} on {t.full} to {timestamp(ms)}", topic=t.full, subscription=sub, timestamp=ms)
        else:
            api.request("POST", _sub_path(t, sub) + "/resetcursor", message_id(a.messageId))
            out.done(f"Reset {sub} on {t.full} to {a.messageId}", topic=t.full, subscription=sub)

    def peek(api, out, a) -> None:
        t, sub = topic(a.topic), name("subscription", a.subscription)
        if not 1 <= a.count <= 1000:
            raise UsageError(f"-n must be between 1 and 1000 (got {a.count})")
        data = api.request("GET", _sub_path(t, sub) + "/peek", query={"count": str(a.count)})
        out.emit(data, lambda d: render_messages(d["messages"]))

    def get_message(api, out, a) -> None:
        t = topic(a.topic)
        data = api.request("GET", topic_path(t) + f"/ledger/{a.ledger}/entry/{a.entry}",
                           query={"batchIndex": str(a.batch_index)})
        out.emit(data, lambda d: render_messages(d["messages"] if "messages" in d else [d]))

    def last_message_id(api, out, a) -> None:
        out.emit(api.request("GET", topic_path(topic(a.topic)) + "/lastMessageId"), key_values)

    def terminate(api, out, a) -> None:
        t = topic(a.topic)
        if _partitions(api, t):
            data = api.request("POST", topic_path(t) + "/terminate/partitions")
            out.emit(data, lambda d: table(["PARTITION", "LAST ENTRY"], [[p, m.get("entryId")] for p, m in d.items()]))
        else:
            data = api.request("POST", topic_path(t) + "/terminate")
            out.emit(data, lambda d: print(f"Topic {t.full} terminated; last entry {d.get('entryId')}"))

    def compact(api, out, a) -> None:
        t = topic(a.topic)
        api.request("PUT", topic_path(t) + "/compaction")
        out.done(f"Compaction of {t.full} started (see compaction-status)", topic=t.full)

    def compaction_status(api, out, a) -> None:
        data = api.request("GET", topic_path(topic(a.topic)) + "/compaction")
        out.emit(data, lambda d: print(d["status"] + (f": {d['lastError']}" if d.get("lastError") else "")))

    def unload(api, out, a) -> None:
        t = topic(a.topic)
        api.request("PUT", topic_path(t) + "/unload")
        out.done(f"Unloaded {t.full}", topic=t.full)

    def update_partitions(api, out, a) -> None:
        t = topic(a.topic)
        if a.partitions < 1:
            raise UsageError(f"--partitions must be at least 1 (got {a.partitions})")
        api.request("POST", topic_path(t) + "/partitions", a.partitions)
        out.done(f"{t.full} now has {a.partitions} partitions", topic=t.full, partitions=a.partitions)

    def dead_letter_path(a) -> str:
        return topic_path(topic(a.topic)) + f"/subscription/{q(name('subscription', a.subscription))}/deadLetterPolicy"

    def set_dead_letter(api, out, a) -> None:
        body = {"maxRedeliverCount": a.max_redeliver_count}
        for key, value in (("deadLetterTopic", a.dead_letter_topic),
                           ("initialSubscriptionName", a.initial_subscription_name),
                           ("retryLetterTopic", a.retry_letter_topic)):
            if value:
                body[key] = value
        api.request("POST", dead_letter_path(a), body)
        out.done(f"Dead-letter policy of {topic(a.topic).full} subscription {a.subscription} set", **body)

    def get_dead_letter(api, out, a) -> None:
        data = api.request("GET", dead_letter_path(a))
        out.emit(data, lambda d: print("no dead-letter policy set") if d is None else key_values(d))

    def remove_dead_letter(api, out, a) -> None:
        api.request("DELETE", dead_letter_path(a))
        out.done(f"Dead-letter policy of {topic(a.topic).full} subscription {a.subscription} removed")

    def sub_arg(p) -> None:
        p.add_argument("--subscription", "-s", required=True)

    p = add("create-subscription", create_subscription, "create a durable subscription", ("topic",))
    sub_arg(p)
    p.add_argument("--messageId", "-m", default="latest",
                   help="where it starts: latest (default), earliest or LEDGER:ENTRY[:PARTITION[:BATCH]]")
    p = add("skip", skip, "skip the next N unacknowledged messages (each partition)", ("topic",))
    sub_arg(p)
    p.add_argument("--count", "-n", type=int, required=True)
    p = add("clear-backlog", clear_backlog, "skip every message of a subscription", ("topic",))
    sub_arg(p)
    p = add("reset-cursor", reset_cursor, "move a subscription back (or forward) to a time or a message id; "
            "its consumers reconnect and receive from there", ("topic",))
    sub_arg(p)
    p.add_argument("--time", "-t", help="how long ago: 10m, 2h, 1d (the first message published since)")
    p.add_argument("--messageId", "-m", help="LEDGER:ENTRY[:PARTITION[:BATCH]], earliest or latest")
    p = add("peek-messages", peek, "show the next unacknowledged messages (the cursor does not move)",
            ("topic",))
    sub_arg(p)
    p.add_argument("--count", "-n", type=int, default=1)
    p = add("get-message-by-id", get_message, "show a message by its id (of a partition)", ("topic",))
    p.add_argument("--ledger", "-l", type=int, default=0, help="always 0 in Magnetar (one ledger per partition)")
    p.add_argument("--entry", "-e", type=int, required=True)
    p.add_argument("--batch-index", "-b", type=int, default=-1, help="one message of the entry (default: all)")
    add("last-message-id", last_message_id, "the id of the last message (each partition's)", ("topic",))
    add("terminate", terminate, "accept no more messages (consumers then see the end of the topic)",
        ("topic",))
    add("compact", compact, "compact the topic: keep the latest message of each key (in the background)",
        ("topic",))
    add("compaction-status", compaction_status, "the status of the topic's last compaction", ("topic",))
    add("unload", unload, "hand the topic's partitions to another broker", ("topic",))
    p = add("update-partitioned-topic", update_partitions, "raise a partitioned topic's partition count",
            ("topic",))
    p.add_argument("--partitions", "-p", type=int, required=True)
    p = add("set-dead-letter-policy", set_dead_letter,
            "move a subscription's messages redelivered too often to a dead-letter topic, on the broker, "
            "whatever client consumes", ("topic",))
    sub_arg(p)
    p.add_argument("--max-redeliver-count", "-m", type=int, required=True,
                   help="redeliveries allowed; the next failure moves the message")
    p.add_argument("--dead-letter-topic", "-d", help="default: <topic>-<subscription>-DLQ")
    p.add_argument("--initial-subscription-name", "-i", help="a subscription created on the dead-letter topic first")
    p.add_argument("--retry-letter-topic", "-r", help="default: <topic>-<subscription>-RETRY")
    p = add("get-dead-letter-policy", get_dead_letter, "a subscription's dead-letter policy set by an operator",
            ("topic",))
    sub_arg(p)
    p = add("remove-dead-letter-policy", remove_dead_letter, "remove a subscription's dead-letter policy",
            ("topic",))
    sub_arg(p)
