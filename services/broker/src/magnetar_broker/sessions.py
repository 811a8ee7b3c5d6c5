"""Client sessions: the part a Pulsar connection plays.  Pure: the caller passes time.

A session not kept alive for the timeout expires; its producers and consumers are
closed with it.  A session with a request in flight (a long-poll fetch) is alive.  A
session belongs to the role that opened it: another role naming it is told it does not
exist (ids are no oracle: an unknown and a foreign session look the same).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field

from magnetar_protocol.errors import SessionNotFound


def new_object_id() -> int:
    """A producer or consumer id: random 63 bits, so an id a client kept from another
    broker (or an earlier life of this one) never names someone else's object here."""
    return secrets.randbits(63) or 1


@dataclass(eq=False)
class Session:
    session_id: str
    client_name: str
    last_seen: float
    role: str = ""
    inflight: int = 0
    producers: set[int] = field(default_factory=set)
    consumers: set[int] = field(default_factory=set)
    waiting: set[tuple[str, str]] = field(default_factory=set)  # (topic, producer name) queued


class SessionRegistry:
    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.sessions: dict[str, Session] = {}

    def open(self, client_name: str, now: float, role: str = "") -> Session:
        session = Session(uuid.uuid4().hex, client_name, now, role)
        self.sessions[session.session_id] = session
        return session

    def get(self, session_id: str, now: float, role: str | None = None) -> Session:
        """The session; SessionNotFound if unknown, expired, or (``role`` given) another
        role's."""
        session = self.sessions.get(session_id)
        if session is None or (role is not None and session.role != role):
            raise SessionNotFound(
                f"session {session_id or '(none)'} is unknown or expired; open a new session"
            )
        session.last_seen = now
        return session

    def close(self, session_id: str, role: str | None = None) -> Session | None:
        session = self.sessions.get(session_id)
        if session is None or (role is not None and session.role != role):
            return None
        return self.sessions.pop(session_id)

    def expired(self, now: float) -> list[Session]:
        """Remove and return every session idle for longer than the timeout."""
        gone = [s for s in self.sessions.values()
                if s.inflight == 0 and now - s.last_seen > self.timeout_s]
        for s in gone:
            del self.sessions[s.session_id]
        return gone
