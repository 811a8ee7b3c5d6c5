"""What a failed command prints on stderr: what went wrong, naming the thing, and a
``fix:`` line saying what to do about it."""

from __future__ import annotations

from magnetar.admin_cli._http import DEFAULT_ADMIN_URL, Refused
from magnetar.admin_cli._names import topic as parse_topic

PROG = "magnetar-admin"


def refused(e: Refused) -> str:
    detail = f"HTTP {e.status}" + (f" {e.code}" if e.code else "")
    return f"{PROG}: error: {e.reason} ({detail})"


def server_failed(e: Refused, url: str) -> str:
    detail = f"HTTP {e.status}" + (f" {e.code}" if e.code else "")
    return f"{PROG}: the admin service at {url} failed: {e.reason} ({detail})"


def unreachable(exc: Exception, url: str) -> str:
    return (f"{PROG}: cannot connect to the admin service at {url} ({exc}).\n"
            f"  fix: start Magnetar (`magnetar-local run` serves the admin API on {DEFAULT_ADMIN_URL}), "
            "or point --admin-url or MAGNETAR_ADMIN_URL at a running admin service")


def bad_answer(exc: Exception, url: str) -> str:
    return (f"{PROG}: {url} did not answer as the Magnetar admin service does: {exc}\n"
            "  fix: point --admin-url at the admin service (port 8081 under `magnetar-local run`), "
            "not at a broker or a web page")


def hint(e: Refused, a, admin_url: str) -> str:
    """The ``fix:`` for a refusal or a server failure, from its code and the command."""
    topic = getattr(a, "topic", None)
    try:
        namespace = getattr(a, "namespace", None) or (parse_topic(topic).namespace_name if topic else None)
    except Exception:  # noqa: BLE001 - a hint must never hide the error it explains
        namespace = None
    tenant = getattr(a, "tenant", None) or (namespace.split("/")[0] if namespace else None)
    command = f"{getattr(a, 'group', '')} {getattr(a, 'command', '')}"
    readyz = f"`curl {admin_url}/readyz`"
    if e.code == "TopicNotFound" and command.startswith("transactions"):
        return (f"give an existing topic; for a partitioned topic, one partition ({topic}-partition-0); "
                f"`magnetar-admin topics list {namespace}` shows them")
    if e.status == 404 and command.endswith("transaction-key"):
        return ("`magnetar-admin transactions list-transaction-keys` lists the keys "
                "(with --owner for another owner's keys)")
    hints = {
        "TenantNotFound": f"create it with `magnetar-admin tenants create {tenant}`; "
                          "`magnetar-admin tenants list` shows the tenants",
        "NamespaceNotFound": f"create it with `magnetar-admin namespaces create {namespace}`; "
                             f"`magnetar-admin namespaces list {tenant}` shows the namespaces",
        "TopicNotFound": f"create it with `magnetar-admin topics create {topic}`; "
                         f"`magnetar-admin topics list {namespace}` shows the topics",
        "SubscriptionNotFound": f"`magnetar-admin topics subscriptions {topic}` lists the subscriptions",
        "InvalidTopicName": "names may use letters, digits and _ = : . - only, without '..'",
        "TransactionNotFound": "check the id; `magnetar-admin transactions slow-transactions -t 0ms` "
                               "lists the open transactions",
        "TransactionCoordinatorNotFoundError": "the first part of a transaction id (-m) is its coordinator; "
                                               "`magnetar-admin transactions coordinator-stats` lists them",
        "AuthenticationError": "pass a valid token with --auth-token or MAGNETAR_AUTH_TOKEN",
        "AuthorizationError": "use a token of a superuser role (or, for a transaction or a transaction key, "
                              "of its owner)",
        "ServiceNotReady": f"the admin service is starting; retry shortly ({readyz})",
        "PersistenceError": f"the admin service cannot reach its database; check it ({readyz})",
    }
    if e.code in hints:
        return hints[e.code]
    if e.code == "Conflict" and "force" in e.reason:
        return "close the clients first, or repeat the command with --force"
    if e.code == "Conflict" and "already exists" in e.reason:
        return "nothing to do if it is the one you meant; otherwise pick another name"
    if e.code == "Conflict" and "still has" in e.reason:
        return "delete what it contains first" + (", or pass --force" if hasattr(a, "force") else "")
    if e.server_side:
        return (f"the admin service (or a proxy in front of it) failed; check {readyz} and its log, "
                "then retry")
    return ""
