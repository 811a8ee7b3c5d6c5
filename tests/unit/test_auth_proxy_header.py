"""``X-Magnetar-Authorization``: the Magnetar token's header when a proxy in front of the
service consumes ``Authorization`` (the Kubernetes API server's service proxy, used by
``kubectl magnetar``).  The middleware is driven as ASGI, with the real Authenticator."""

from __future__ import annotations

import asyncio

import jwt

from magnetar_runtime.auth import Authenticator, AuthMiddleware, current_role
from magnetar_runtime.settings import ServiceSettings

SECRET = "a-secret-of-at-least-thirty-two-bytes"


def call(headers: dict[str, str]) -> tuple[int, str]:
    """(status, role the handler saw or the error body) for one GET /x."""
    seen: list[str] = []

    async def app(scope, receive, send):
        seen.append(current_role())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    auth = Authenticator(ServiceSettings(auth_enabled=True, auth_jwt_secret=SECRET))
    middleware = AuthMiddleware(app, auth)
    sent: list[dict] = []
    scope = {"type": "http", "path": "/x", "method": "GET",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    asyncio.run(middleware(scope, receive, send))
    status = sent[0]["status"]
    return status, (seen[0] if seen else sent[1]["body"].decode())


def bearer(role: str, secret: str = SECRET) -> str:
    return "Bearer " + jwt.encode({"sub": role}, secret, algorithm="HS256")


def test_the_alternative_header_authenticates_alone():
    assert call({"X-Magnetar-Authorization": bearer("ops")}) == (200, "ops")


def test_the_alternative_header_wins_over_a_proxy_credential_in_authorization():
    # Behind the API server proxy, Authorization (if it arrives at all) is the kubectl
    # user's cluster token, not a Magnetar token.
    status, role = call({"Authorization": "Bearer cluster-token-not-a-jwt",
                         "X-Magnetar-Authorization": bearer("ops")})
    assert (status, role) == (200, "ops")


def test_a_bad_alternative_header_is_refused_and_the_error_names_both_headers():
    status, body = call({"X-Magnetar-Authorization": bearer("ops", "another-secret-of-32-bytes-at-least")})
    assert status == 401 and "bearer token was refused" in body
    status, body = call({})
    assert status == 401 and "X-Magnetar-Authorization" in body


def test_authorization_alone_still_works():
    assert call({"Authorization": bearer("billing")}) == (200, "billing")
