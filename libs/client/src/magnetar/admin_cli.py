"""``magnetar-admin``: the command line of Magnetar's admin REST API, after ``pulsar-admin``.

    magnetar-admin tenants list
    magnetar-admin namespaces create acme/orders
    magnetar-admin topics create acme/orders/events -p 4
    magnetar-admin --output json topics stats acme/orders/events

A TOPIC is a full name (``persistent://tenant/namespace/name``), ``tenant/namespace/name``,
or a short name (``events`` is ``persistent://public/default/events``).  Global options
(--admin-url, --auth-token, --output, --timeout) go before or after the command.

Exit codes: 0 done; 1 the admin service refused (its reason and a fix on stderr);
2 usage error; 3 the admin service could not be reached.

Standard library only (argparse, urllib), so the command starts fast.  To add a command
group (``transactions list-transaction-keys`` ...): write a ``_group_transactions(add)``
function like the ones below and list it in ``GROUPS``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:8081"
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
_NO_BODY = object()


class Refused(Exception):
    """The admin service answered with an error status."""

    def __init__(self, status: int, code: str, reason: str):
        super().__init__(reason)
        self.status, self.code, self.reason = status, code, reason


class Unreachable(Exception):
    pass


class UsageError(Exception):
    pass


# ---------------------------------------------------------------- HTTP


class AdminApi:
    def __init__(self, base_url: str, auth_token: str | None = None, timeout: float = 30.0):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageError(f"--admin-url {base_url!r} is not an http:// or https:// URL "
                             f"(e.g. {DEFAULT_ADMIN_URL})")
        self.base_url = base_url.rstrip("/")
        self.auth_token = auth_token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = _NO_BODY, query: dict | None = None) -> Any:
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"accept": "application/json"}
        if self.auth_token:
            headers["authorization"] = f"Bearer {self.auth_token}"
        data = None
        if body is not _NO_BODY:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise _refusal(err.code, err.read()) from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout,
                TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise Unreachable(f"{type(reason).__name__}: {reason}" if str(reason) else
                              type(reason).__name__) from None
        if not payload:
            return None
        try:
            return json.loads(payload)
        except ValueError:
            raise Refused(200, "BadAnswer", f"{method} {url} answered something that is not JSON: "
                                            f"{payload[:200]!r}") from None


def _refusal(status: int, payload: bytes) -> Refused:
    try:
        answer = json.loads(payload)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and ("reason" in answer or "detail" in answer):
        return Refused(status, str(answer.get("code", "")), str(answer.get("reason") or answer.get("detail")))
    text = payload.decode(errors="replace").strip()[:300]
    return Refused(status, "", text or http.client.responses.get(status, "error"))


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


# ---------------------------------------------------------------- names


def _topic(value: str):
    from magnetar_protocol.errors import InvalidTopicName
    from magnetar_protocol.topics import TopicName

    try:
        return TopicName.parse(value)
    except InvalidTopicName as exc:
        raise UsageError(f"invalid topic {value!r}: {exc}") from None


def _name(kind: str, value: str) -> str:
    from magnetar_protocol.errors import InvalidTopicName
    from magnetar_protocol.topics import validate_name_part

    try:
        return validate_name_part(kind, value)
    except InvalidTopicName as exc:
        raise UsageError(str(exc)) from None


def _namespace(value: str) -> tuple[str, str]:
    parts = value.split("/")
    if len(parts) != 2:
        raise UsageError(f"namespace {value!r} must be TENANT/NAMESPACE, e.g. public/default")
    return _name("tenant", parts[0]), _name("namespace", parts[1])


def _topic_path(topic) -> str:
    return f"/admin/v2/persistent/{_q(topic.tenant)}/{_q(topic.namespace)}/{_q(topic.local_name)}"


# ---------------------------------------------------------------- output


class Out:
    def __init__(self, mode: str):
        self.json = mode == "json"

    def emit(self, data: Any, render: Callable[[Any], None]) -> None:
        if self.json:
            print(json.dumps(data, indent=2))
        else:
            render(data)

    def done(self, message: str, **fields) -> None:
        """The answer to a change: a sentence, or {"result": ..., fields} in JSON."""
        self.emit({"result": "ok", **fields}, lambda _: print(message))


def table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [headers] + cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def column(header: str) -> Callable[[list], None]:
    return lambda values: table([header], [[v] for v in values])


def key_values(data: dict, keys: list[str]) -> None:
    table(["FIELD", "VALUE"], [[k, data.get(k)] for k in keys if k in data])


# ---------------------------------------------------------------- commands

def _group_tenants(add) -> None:
    def list_(api: AdminApi, out: Out, a) -> None:
        out.emit(api.request("GET", "/admin/v2/tenants"), column("TENANT"))

    def get(api, out, a) -> None:
        info = api.request("GET", f"/admin/v2/tenants/{_q(_name('tenant', a.tenant))}")
        out.emit(info, lambda d: key_values(d, ["adminRoles", "allowedClusters"]))

    def _info(a) -> dict:
        return {"adminRoles": _csv(a.admin_roles), "allowedClusters": _csv(a.allowed_clusters)}

    def create(api, out, a) -> None:
        api.request("PUT", f"/admin/v2/tenants/{_q(_name('tenant', a.tenant))}", _info(a))
        out.done(f"Created tenant {a.tenant}", tenant=a.tenant)

    def update(api, out, a) -> None:
        api.request("POST", f"/admin/v2/tenants/{_q(_name('tenant', a.tenant))}", _info(a))
        out.done(f"Updated tenant {a.tenant}", tenant=a.tenant)

    def delete(api, out, a) -> None:
        api.request("DELETE", f"/admin/v2/tenants/{_q(_name('tenant', a.tenant))}")
        out.done(f"Deleted tenant {a.tenant}", tenant=a.tenant)

    add("list", list_, "list tenants")
    add("get", get, "show a tenant's configuration", ("tenant",))
    for name, fn, text in (("create", create, "create a tenant"),
                           ("update", update, "replace a tenant's admin roles")):
        p = add(name, fn, text, ("tenant",))
        p.add_argument("--admin-roles", "-r", default="", help="comma-separated role names")
        p.add_argument("--allowed-clusters", "-c", default="",
                       help="comma-separated clusters (Magnetar is one cluster: standalone)")
    add("delete", delete, "delete a tenant that has no namespaces", ("tenant",))


def _group_namespaces(add) -> None:
    def path(a) -> str:
        tenant, ns = _namespace(a.namespace)
        return f"/admin/v2/namespaces/{_q(tenant)}/{_q(ns)}"

    def list_(api, out, a) -> None:
        out.emit(api.request("GET", f"/admin/v2/namespaces/{_q(_name('tenant', a.tenant))}"),
                 column("NAMESPACE"))

    def create(api, out, a) -> None:
        api.request("PUT", path(a))
        out.done(f"Created namespace {a.namespace}", namespace=a.namespace)

    def delete(api, out, a) -> None:
        api.request("DELETE", path(a), query={"force": "true"} if a.force else None)
        out.done(f"Deleted namespace {a.namespace}", namespace=a.namespace)

    def topics(api, out, a) -> None:
        out.emit(api.request("GET", path(a) + "/topics"), column("TOPIC"))

    def set_dedup(api, out, a) -> None:
        api.request("POST", path(a) + "/deduplication", a.enable)
        state = "enabled" if a.enable else "disabled"
        out.done(f"Deduplication {state} on namespace {a.namespace}", namespace=a.namespace,
                 deduplication=a.enable)

    def get_dedup(api, out, a) -> None:
        value = api.request("GET", path(a) + "/deduplication")
        out.emit(value, lambda v: print("broker default (not set)" if v is None else
                                        ("enabled" if v else "disabled")))

    def remove_dedup(api, out, a) -> None:
        api.request("DELETE", path(a) + "/deduplication")
        out.done(f"Namespace {a.namespace} follows the broker's deduplication default again",
                 namespace=a.namespace, deduplication=None)

    add("list", list_, "list a tenant's namespaces", ("tenant",))
    add("create", create, "create a namespace", ("namespace",))
    p = add("delete", delete, "delete a namespace (with --force: and all its topics)", ("namespace",))
    p.add_argument("--force", "-f", action="store_true", help="delete its topics too")
    add("topics", topics, "list a namespace's topics", ("namespace",))
    p = add("set-deduplication", set_dedup, "turn deduplication on or off", ("namespace",))
    switch = p.add_mutually_exclusive_group(required=True)
    switch.add_argument("--enable", "-e", dest="enable", action="store_true", default=None)
    switch.add_argument("--disable", "-d", dest="enable", action="store_false")
    add("get-deduplication", get_dedup, "show the deduplication policy", ("namespace",))
    add("remove-deduplication", remove_dedup, "go back to the broker default", ("namespace",))


def _partitions(api: AdminApi, topic) -> int:
    return api.request("GET", _topic_path(topic) + "/partitions")["partitions"]


def _group_topics(add) -> None:
    def create(api, out, a) -> None:
        topic = _topic(a.topic)
        if a.partitions is None:
            api.request("PUT", _topic_path(topic))
            out.done(f"Created topic {topic.full}", topic=topic.full, partitions=0)
        else:
            if a.partitions < 1:
                raise UsageError(f"--partitions must be at least 1 (got {a.partitions})")
            api.request("PUT", _topic_path(topic) + "/partitions", a.partitions)
            out.done(f"Created partitioned topic {topic.full} with {a.partitions} partitions",
                     topic=topic.full, partitions=a.partitions)

    def list_(api, out, a) -> None:
        tenant, ns = _namespace(a.namespace)
        suffix = "/partitioned" if a.partitioned else ""
        out.emit(api.request("GET", f"/admin/v2/persistent/{_q(tenant)}/{_q(ns)}{suffix}"), column("TOPIC"))

    def delete(api, out, a) -> None:
        topic = _topic(a.topic)
        count = _partitions(api, topic)
        query = {"force": "true"} if a.force else None
        api.request("DELETE", _topic_path(topic) + ("/partitions" if count else ""), query=query)
        out.done(f"Deleted topic {topic.full}" + (f" and its {count} partitions" if count else ""),
                 topic=topic.full, partitions=count)

    def stats(api, out, a) -> None:
        topic = _topic(a.topic)
        if _partitions(api, topic):
            data = api.request("GET", _topic_path(topic) + "/partitioned-stats",
                               query={"perPartition": "true"})
        else:
            data = api.request("GET", _topic_path(topic) + "/stats")
        out.emit(data, lambda d: _render_stats(topic.full, d))

    def stats_internal(api, out, a) -> None:
        topic = _topic(a.topic)
        if _partitions(api, topic):
            data = api.request("GET", _topic_path(topic) + "/partitioned-internalStats")
        else:
            data = api.request("GET", _topic_path(topic) + "/internalStats")
        out.emit(data, lambda d: _render_internal(topic.full, d))

    def subscriptions(api, out, a) -> None:
        out.emit(api.request("GET", _topic_path(_topic(a.topic)) + "/subscriptions"), column("SUBSCRIPTION"))

    def unsubscribe(api, out, a) -> None:
        topic = _topic(a.topic)
        sub = _name("subscription", a.subscription)
        api.request("DELETE", _topic_path(topic) + f"/subscription/{_q(sub)}",
                    query={"force": "true"} if a.force else None)
        out.done(f"Deleted subscription {sub} of {topic.full}", topic=topic.full, subscription=sub)

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


def _group_brokers(add) -> None:
    def list_(api, out, a) -> None:
        out.emit(api.request("GET", "/admin/v2/brokers"), column("BROKER URL"))

    def ownership(api, out, a) -> None:
        rows = api.request("GET", "/admin/v2/brokers/ownership")
        out.emit(rows, lambda rs: table(["TOPIC", "BROKER", "URL", "EPOCH", "ALIVE"], [
            [r["topic"], r["brokerId"], r["brokerUrl"], r["ownerEpoch"], r["brokerAlive"]] for r in rs]))

    add("list", list_, "URLs of the live brokers")
    add("ownership", ownership, "which broker owns which topic")


GROUPS: dict[str, tuple[str, Callable]] = {
    "tenants": ("manage tenants", _group_tenants),
    "namespaces": ("manage namespaces and their policies", _group_namespaces),
    "topics": ("manage persistent topics and subscriptions", _group_topics),
    "brokers": ("list brokers and topic ownership", _group_brokers),
}


# ---------------------------------------------------------------- table renderings


def _render_stats(topic: str, d: dict) -> None:
    partitions = d.get("metadata", {}).get("partitions")
    print(f"Topic {topic}" + (f" ({partitions} partitions)" if partitions else
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
        [name, s.get("type"), s.get("msgBacklog"), s.get("unackedMessages"), len(s.get("consumers", []))]
        for name, s in d.get("subscriptions", {}).items()])
    if d.get("partitions"):
        print("\nPartitions")
        table(["PARTITION", "OWNER", "ENTRIES", "STORAGE", "PUBLISHERS", "SUBSCRIPTIONS"], [
            [name, p.get("ownerBroker"), p.get("numberOfEntries"), p.get("storageSize"),
             len(p.get("publishers", [])), len(p.get("subscriptions", {}))]
            for name, p in d["partitions"].items()])


def _render_internal(topic: str, d: dict) -> None:
    if "metadata" in d:
        print(f"Topic {topic} ({d['metadata']['partitions']} partitions)")
        table(["PARTITION", "OWNER", "OWNER EPOCH", "ENTRIES", "SIZE", "LAST CONFIRMED", "CURSORS"], [
            [name, p.get("ownerBroker"), p.get("ownerEpoch"), p.get("numberOfEntries"), p.get("totalSize"),
             p.get("lastConfirmedEntry"), len(p.get("cursors", {}))]
            for name, p in d.get("partitions", {}).items()])
        return
    print(f"Topic {topic}")
    key_values(d, ["entriesAddedCounter", "numberOfEntries", "numberOfMessages", "totalSize",
                   "lastConfirmedEntry", "state", "ownerBroker", "ownerBrokerUrl", "ownerEpoch", "topicEpoch"])
    print("\nCursors")
    table(["NAME", "MARK DELETE", "INDIVIDUALLY DELETED", "BATCH ACKS"], [
        [name, c.get("markDeletePosition"), c.get("individuallyDeletedMessages"), c.get("batchDeletedIndexes")]
        for name, c in d.get("cursors", {}).items()])


# ---------------------------------------------------------------- errors


def _hint(e: Refused, a, admin_url: str) -> str:
    topic = getattr(a, "topic", None)
    namespace = getattr(a, "namespace", None) or (_topic(topic).namespace_name if topic else None)
    tenant = getattr(a, "tenant", None) or (namespace.split("/")[0] if namespace else None)
    hints = {
        "TenantNotFound": f"create it with `magnetar-admin tenants create {tenant}`; "
                          "`magnetar-admin tenants list` shows the tenants",
        "NamespaceNotFound": f"create it with `magnetar-admin namespaces create {namespace}`; "
                             f"`magnetar-admin namespaces list {tenant}` shows the namespaces",
        "TopicNotFound": (f"create it with `magnetar-admin topics create {topic}`; "
                          f"`magnetar-admin topics list {namespace}` shows the topics"),
        "SubscriptionNotFound": f"`magnetar-admin topics subscriptions {topic}` lists the subscriptions",
        "InvalidTopicName": "names may use letters, digits and _ = : . - only, without '..'",
        "AuthenticationError": "pass a valid token with --auth-token",
        "AuthorizationError": "use a token whose role may administer this tenant",
        "ServiceNotReady": f"the admin service is starting; retry shortly (`curl {admin_url}/readyz`)",
        "PersistenceError": f"the admin service cannot reach its database; check it (`curl {admin_url}/readyz`)",
    }
    if e.code == "Conflict" and "force" in e.reason:
        return "close the clients first, or repeat the command with --force"
    if e.code == "Conflict" and "already exists" in e.reason:
        return "nothing to do if it is the one you meant; otherwise pick another name"
    if e.code == "Conflict" and "still has" in e.reason:
        return "delete what it contains first" + (", or pass --force" if hasattr(a, "force") else "")
    return hints.get(e.code, "")


def _build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    def global_options(p: argparse.ArgumentParser, defaults: bool) -> None:
        d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
        p.add_argument("--admin-url", default=d(os.environ.get("MAGNETAR_ADMIN_URL") or DEFAULT_ADMIN_URL),
                       help=f"admin service URL (default: $MAGNETAR_ADMIN_URL or {DEFAULT_ADMIN_URL})")
        p.add_argument("--auth-token", default=d(os.environ.get("MAGNETAR_AUTH_TOKEN")),
                       help="sent as 'Authorization: Bearer TOKEN' (default: $MAGNETAR_AUTH_TOKEN)")
        p.add_argument("--output", "-o", choices=("table", "json"), default=d("table"),
                       help="table (default) or json")
        p.add_argument("--timeout", type=float, default=d(30.0), help="seconds to wait for an answer")

    parser = argparse.ArgumentParser(
        prog="magnetar-admin", description="Administer Magnetar through its admin REST API.",
        epilog="Exit codes: 0 ok, 1 refused by the admin service, 2 usage error, 3 cannot connect.")
    global_options(parser, True)
    common = argparse.ArgumentParser(add_help=False)
    global_options(common, False)
    groups = parser.add_subparsers(dest="group", metavar="GROUP", required=True)
    for group, (text, build) in GROUPS.items():
        gp = groups.add_parser(group, help=text, description=text, parents=[common])
        commands = gp.add_subparsers(dest="command", metavar="COMMAND", required=True)

        def add(name, fn, help_text, positionals=(), _commands=commands):
            p = _commands.add_parser(name, help=help_text, description=help_text, parents=[common])
            for pos in positionals:
                p.add_argument(pos, metavar=pos.upper(), help={"namespace": "TENANT/NAMESPACE"}.get(pos))
            p.set_defaults(run=fn)
            return p

        build(add)
    return parser, common


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    parser, _ = _build_parser()
    a = parser.parse_args(argv)  # exits 2 on a usage error
    try:
        api = AdminApi(a.admin_url, a.auth_token, a.timeout)
        a.run(api, Out(a.output), a)
        return EXIT_OK
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"magnetar-admin: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Refused as exc:
        detail = f"HTTP {exc.status}" + (f" {exc.code}" if exc.code else "")
        print(f"magnetar-admin: error: {exc.reason} ({detail})", file=sys.stderr)
        hint = _hint(exc, a, a.admin_url)
        if hint:
            print(f"  fix: {hint}", file=sys.stderr)
        return EXIT_REFUSED
    except Unreachable as exc:
        print(f"magnetar-admin: cannot connect to the admin service at {a.admin_url} ({exc}).\n"
              "  fix: start Magnetar (`magnetar-local run` serves the admin API on "
              f"{DEFAULT_ADMIN_URL}), or point --admin-url or MAGNETAR_ADMIN_URL at a running "
              "admin service", file=sys.stderr)
        return EXIT_UNREACHABLE
    except BrokenPipeError:  # `magnetar-admin ... | head`
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
