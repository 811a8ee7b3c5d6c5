"""``namespaces ...``: namespaces and their deduplication policy."""

from __future__ import annotations

from magnetar.admin_cli._http import q
from magnetar.admin_cli._names import name, namespace
from magnetar.admin_cli._output import column


def group_namespaces(add) -> None:
    def path(a) -> str:
        tenant, ns = namespace(a.namespace)
        return f"/admin/v2/namespaces/{q(tenant)}/{q(ns)}"

    def list_(api, out, a) -> None:
        out.emit(api.request("GET", f"/admin/v2/namespaces/{q(name('tenant', a.tenant))}"),
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
