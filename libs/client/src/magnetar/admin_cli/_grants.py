"""What the permission commands of ``namespaces`` and ``topics`` share: the --actions
and --roles arguments, checked before anything is sent, and the table of grants."""

from __future__ import annotations

from magnetar.admin_cli._http import UsageError
from magnetar.admin_cli._names import csv
from magnetar.admin_cli._output import table

ACTIONS = ("produce", "consume")  # magnetar_runtime.permissions.ACTIONS


def actions(value: str) -> list[str]:
    chosen = csv(value)
    unknown = [a for a in chosen if a not in ACTIONS]
    if not chosen or unknown:
        raise UsageError(f"--actions takes {' and/or '.join(ACTIONS)}, comma-separated "
                         f"(got {value!r})")
    return chosen


def roles(value: str) -> list[str]:
    chosen = csv(value)
    if not chosen:
        raise UsageError("--roles needs at least one role, comma-separated")
    return chosen


def render_grants(grants: dict) -> None:
    """{role or subscription: [actions or roles]} as a table."""
    table(["NAME", "GRANTED"], [[k, ",".join(v)] for k, v in sorted(grants.items())])
