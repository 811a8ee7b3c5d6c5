import pytest

from magnetar_broker.sessions import SessionRegistry
from magnetar_protocol.errors import SessionNotFound


def test_sessions_expire_unless_kept_alive():
    reg = SessionRegistry(timeout_s=3)
    a = reg.open("a", now=0)
    b = reg.open("b", now=0)
    reg.get(a.session_id, now=2.5)
    assert [s.client_name for s in reg.expired(now=4)] == ["b"]
    with pytest.raises(SessionNotFound):
        reg.get(b.session_id, now=4)


def test_session_with_request_in_flight_stays():
    reg = SessionRegistry(timeout_s=1)
    s = reg.open("a", now=0)
    s.inflight = 1
    assert reg.expired(now=10) == []
