"""``namespaces ...``: namespaces, their deduplication policy and permissions."""

from __future__ import annotations

import json

from magnetar.admin_cli import _grants
from magnetar.admin_cli._http import q
from magnetar.admin_cli._names import name, namespace
from magnetar.admin_cli._output import column
from magnetar.admin_cli.policies import add_policy_commands
from magnetar.admin_cli.schemas import add_schema_policy_commands


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

    def grant(api, out, a) -> None:
        acts = _grants.actions(a.actions)
        api.request("POST", path(a) + f"/permissions/{q(a.role)}", acts)
        out.done(f"Granted {','.join(acts)} on {a.namespace} to role {a.role}",
                 namespace=a.namespace, role=a.role, actions=acts)

    def revoke(api, out, a) -> None:
        api.request("DELETE", path(a) + f"/permissions/{q(a.role)}")
        out.done(f"Revoked the permissions of role {a.role} on {a.namespace}",
                 namespace=a.namespace, role=a.role)

    def permissions(api, out, a) -> None:
        out.emit(api.request("GET", path(a) + "/permissions"), _grants.render_grants)

    def grant_sub(api, out, a) -> None:
        roles = _grants.roles(a.roles)
        api.request("POST", path(a) + f"/permissions/subscription/{q(name('subscription', a.subscription))}",
                    roles)
        out.done(f"Only {','.join(roles)} may consume through subscription {a.subscription} on "
                 f"{a.namespace}", namespace=a.namespace, subscription=a.subscription, roles=roles)

    def revoke_sub(api, out, a) -> None:
        for role in _grants.roles(a.roles):
            api.request("DELETE", path(a) + f"/permissions/{q(name('subscription', a.subscription))}/{q(role)}")
        out.done(f"Took {a.roles} off subscription {a.subscription} on {a.namespace}",
                 namespace=a.namespace, subscription=a.subscription, roles=_grants.roles(a.roles))

    def sub_permissions(api, out, a) -> None:
        out.emit(api.request("GET", path(a) + "/permissions/subscription"), _grants.render_grants)

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
    p = add("grant-permission", grant, "let a role produce and/or consume on the namespace's topics",
            ("namespace",))
    p.add_argument("--role", required=True)
    p.add_argument("--actions", required=True, help="produce,consume")
    p = add("revoke-permission", revoke, "take a role's namespace grant away", ("namespace",))
    p.add_argument("--role", required=True)
    add("permissions", permissions, "list the namespace's grants", ("namespace",))
    p = add("grant-subscription-permission", grant_sub,
            "let only these roles consume through a subscription name", ("namespace",))
    p.add_argument("--subscription", required=True)
    p.add_argument("--roles", required=True, help="role1,role2")
    p = add("revoke-subscription-permission", revoke_sub,
            "take roles off a subscription's list (an empty list restricts nothing)", ("namespace",))
    p.add_argument("--subscription", required=True)
    p.add_argument("--role", "--roles", dest="roles", required=True, help="role1,role2")
    add("subscription-permissions", sub_permissions, "list the namespace's subscription roles",
        ("namespace",))

    def policies(api, out, a) -> None:
        out.emit(api.request("GET", path(a)), lambda v: print(json.dumps(v, indent=2)))

    add("policies", policies, "show every policy of the namespace", ("namespace",))
    add_policy_commands(add, "namespace", path)
    add_schema_policy_commands(add, path)
