"""Topic authorization as Pulsar's ``PulsarAuthorizationProvider`` decides it
(docs/security.md "Authorization").  Pure: rules, no I/O.

- A superuser may do everything (``Roles.is_superuser``; everyone when authentication
  is off).
- A tenant's admins (its ``adminRoles``) may do every topic operation in the tenant and
  manage its namespaces and permissions (Pulsar's ``validateTenantAdminAccess``, which
  ``allowTopicOperationAsync`` consults first).
- Anyone else needs a grant: ``produce`` to create a producer, ``consume`` to subscribe
  or unsubscribe, either of them to look a topic up (``canLookup``).  A grant is given on
  the namespace or on the (partitioned) topic; the role holds the union of both.
- Subscription auth: when a namespace lists roles for a subscription name, only those
  roles may consume through that subscription (an empty or missing list restricts
  nothing), on top of the ``consume`` grant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from magnetar_protocol.errors import BadRequest

PRODUCE = "produce"
CONSUME = "consume"
LOOKUP = "lookup"  # not a grantable action: produce or consume
# Pulsar's other AuthActions (functions, sources, sinks, packages) name features
# Magnetar does not have, so granting them is refused rather than stored unused.
ACTIONS = (PRODUCE, CONSUME)
MAX_ROLE_LENGTH = 255


@dataclass(frozen=True)
class Policies:
    """What the database says about one topic's tenant, namespace and topic."""
    tenant_admins: frozenset[str] = frozenset()
    namespace_grants: Mapping[str, frozenset[str]] = field(default_factory=dict)  # role -> actions
    topic_grants: Mapping[str, frozenset[str]] = field(default_factory=dict)      # role -> actions
    subscription_roles: Mapping[str, frozenset[str]] = field(default_factory=dict)  # sub -> roles


def is_tenant_admin(policies: Policies, role: str) -> bool:
    return role in policies.tenant_admins


def granted(policies: Policies, role: str, action: str) -> bool:
    return (action in policies.namespace_grants.get(role, ())
            or action in policies.topic_grants.get(role, ()))


def subscription_allows(policies: Policies, role: str, subscription: str | None) -> bool:
    roles = policies.subscription_roles.get(subscription or "")
    return not roles or role in roles


def allowed(policies: Policies, role: str, superuser: bool, action: str,
            subscription: str | None = None) -> bool:
    """May ``role`` do ``action`` (PRODUCE, CONSUME or LOOKUP) on the topic these policies
    describe?  ``subscription``: the one it consumes through (CONSUME only)."""
    if superuser or is_tenant_admin(policies, role):
        return True
    if action == LOOKUP:
        return granted(policies, role, PRODUCE) or granted(policies, role, CONSUME)
    if action == CONSUME:
        return granted(policies, role, CONSUME) and subscription_allows(policies, role, subscription)
    if action == PRODUCE:
        return granted(policies, role, PRODUCE)
    raise ValueError(f"unknown action {action!r}")


def refusal(role: str, action: str, what: str, subscription: str | None = None,
            namespace: str = "NS") -> str:
    """The reason given when ``allowed`` said no, with the command that would grant it."""
    grant = f"`magnetar-admin namespaces grant-permission {namespace} --role {role} --actions"
    if action == CONSUME and subscription:
        return (f"role {role!r} may not consume from {what} through subscription "
                f"{subscription!r}: it needs the consume permission ({grant} consume`) and, if "
                "the subscription is restricted to some roles, to be one of them")
    verb, needed = {LOOKUP: ("look up", "produce or consume"), PRODUCE: ("produce to", PRODUCE),
                    CONSUME: ("consume from", CONSUME)}[action]
    return (f"role {role!r} may not {verb} {what} (it needs {needed}): grant it with "
            f"{grant} {needed.split(' or ')[0]}` (a superuser or the tenant's admin can)")


# ---------------------------------------------------------------- input checks

def validate_role(role: object, what: str = "role") -> str:
    """A role name as a grant may name it: a non-empty string of printable characters."""
    if not isinstance(role, str) or not role:
        raise BadRequest(f"{what} must be a non-empty string")
    if len(role) > MAX_ROLE_LENGTH:
        raise BadRequest(f"{what} is {len(role)} characters long; the limit is {MAX_ROLE_LENGTH}")
    if not role.isprintable():
        raise BadRequest(f"{what} {role!r} has a control character (NUL, newline, ...)")
    return role


def validate_actions(actions: object) -> list[str]:
    """The body of a grant: a JSON list of actions, each one of ACTIONS (sorted, unique)."""
    if not isinstance(actions, list) or not actions:
        raise BadRequest('the body must be a non-empty JSON list of actions, e.g. '
                         '["produce", "consume"]; to take every action away, revoke the permission')
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise BadRequest(f"unknown action(s) {unknown!r}: the actions are {', '.join(ACTIONS)}")
    return sorted(set(actions))


def validate_roles(roles: object) -> list[str]:
    """The body of a subscription grant: a non-empty JSON list of role names."""
    if not isinstance(roles, list) or not roles:
        raise BadRequest("the body must be a non-empty JSON list of role names, e.g. [\"app\"]")
    return sorted({validate_role(r) for r in roles})


def as_grants(rows: Mapping[str, Iterable[str]] | None) -> dict[str, frozenset[str]]:
    return {k: frozenset(v) for k, v in (rows or {}).items()}
