"""Who may do what.  Pure: rules, no I/O.

A role is a token's ``sub``.  Superusers (``MAGNETAR_AUTH_SUPERUSER_ROLES``) may use
every endpoint; other roles may use their own transaction keys and abort their own
transactions.  With authentication off everyone is ``ANONYMOUS``, a superuser, and owns
the keys it names.
"""

from __future__ import annotations

ANONYMOUS = "anonymous"


class Roles:
    def __init__(self, superuser_roles: str, enabled: bool) -> None:
        self.enabled = enabled
        self.superusers = frozenset(r.strip() for r in superuser_roles.split(",") if r.strip())

    def is_superuser(self, role: str) -> bool:
        return not self.enabled or role in self.superusers

    def may_act_for(self, role: str, owner: str | None) -> bool:
        """May ``role`` act on something owned by ``owner`` (a key, a transaction)?"""
        return self.is_superuser(role) or (owner is not None and role == owner)
