"""``tenants ...`` and ``brokers ...``."""

from __future__ import annotations

from magnetar.admin_cli._http import q
from magnetar.admin_cli._names import csv, name
from magnetar.admin_cli._output import column, key_values, table


def group_tenants(add) -> None:
    def path(a) -> str:
        return f"/admin/v2/tenants/{q(name('tenant', a.tenant))}"

    def info(a) -> dict:
        return {"adminRoles": csv(a.admin_roles), "allowedClusters": csv(a.allowed_clusters)}

    def list_(api, out, a) -> None:
        out.emit(api.request("GET", "/admin/v2/tenants"), column("TENANT"))

    def get(api, out, a) -> None:
        out.emit(api.request("GET", path(a)), lambda d: key_values(d, ["adminRoles", "allowedClusters"]))

    def create(api, out, a) -> None:
        api.request("PUT", path(a), info(a))
        out.done(f"Created tenant {a.tenant}", tenant=a.tenant)

    def update(api, out, a) -> None:
        api.request("POST", path(a), info(a))
        out.done(f"Updated tenant {a.tenant}", tenant=a.tenant)

    def delete(api, out, a) -> None:
        api.request("DELETE", path(a))
        out.done(f"Deleted tenant {a.tenant}", tenant=a.tenant)

    add("list", list_, "list tenants")
    add("get", get, "show a tenant's configuration", ("tenant",))
    for cmd, fn, text in (("create", create, "create a tenant"),
                          ("update", update, "replace a tenant's admin roles")):
        p = add(cmd, fn, text, ("tenant",))
        p.add_argument("--admin-roles", "-r", default="", help="comma-separated role names")
        p.add_argument("--allowed-clusters", "-c", default="",
                       help="comma-separated clusters (Magnetar is one cluster: standalone)")
    add("delete", delete, "delete a tenant that has no namespaces", ("tenant",))


def group_brokers(add) -> None:
    def list_(api, out, a) -> None:
        out.emit(api.request("GET", "/admin/v2/brokers"), column("BROKER URL"))

    def ownership(api, out, a) -> None:
        rows = api.request("GET", "/admin/v2/brokers/ownership")
        out.emit(rows, lambda rs: table(["TOPIC", "BROKER", "URL", "EPOCH", "ALIVE"], [
            [r["topic"], r["brokerId"], r["brokerUrl"], r["ownerEpoch"], r["brokerAlive"]] for r in rs]))

    add("list", list_, "URLs of the live brokers")
    add("ownership", ownership, "which broker owns which topic")
