"""Authentication (JWT bearer tokens) and the caller's role for every service.

``AuthMiddleware`` decodes the ``Authorization: Bearer`` token of each request (HS256
with a shared secret, or RS256 with a public key), refuses a missing or bad one with
``AuthenticationError`` (401), and makes the token's ``sub`` the request's role,
readable anywhere in the handler through :func:`current_role`.  With authentication off
every caller is :data:`ANONYMOUS`, a superuser.  Rules on roles live in ``roles.py``.
"""

from __future__ import annotations

import contextvars

import jwt
from starlette.types import ASGIApp, Receive, Scope, Send

from magnetar_protocol.errors import AuthenticationError, AuthorizationError, MagnetarError
from magnetar_runtime.error_answers import error_body
from magnetar_runtime.roles import ANONYMOUS, Roles

_role: contextvars.ContextVar[str] = contextvars.ContextVar("magnetar_role", default=ANONYMOUS)
# The Kubernetes API server's service proxy consumes `Authorization` (it authenticates
# the kubectl user with it and does not pass it on), so a caller behind it (the kubectl
# plugin) sends the Magnetar token in this header instead; when present it wins.
ALT_AUTHORIZATION = b"x-magnetar-authorization"
# Paths open without a token: probes and Prometheus must not need credentials.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def current_role() -> str:
    """The role of the request being handled (ANONYMOUS when authentication is off)."""
    return _role.get()


def set_role(role: str) -> contextvars.Token:
    """Act as ``role`` until ``reset_role(token)`` (an in-process call: rpc.py)."""
    return _role.set(role)


def reset_role(token: contextvars.Token) -> None:
    _role.reset(token)


class Authenticator:
    def __init__(self, settings) -> None:
        self.enabled = settings.auth_enabled
        self.roles = Roles(settings.auth_superuser_roles, self.enabled)
        if settings.auth_jwt_public_key:
            self._key, self._algorithms = settings.auth_jwt_public_key, ["RS256"]
        else:
            self._key, self._algorithms = settings.auth_jwt_secret, ["HS256"]
        if self.enabled and not self._key:
            raise SystemExit("MAGNETAR_AUTH_ENABLED is set but neither MAGNETAR_AUTH_JWT_SECRET "
                             "nor MAGNETAR_AUTH_JWT_PUBLIC_KEY is: give one of them")
        self.max_token_bytes = settings.auth_max_token_bytes
        # An extra check on the path for the service's own rules (admin: superusers only).
        self.path_rule = None  # (authenticator, path, role) -> None or raise
        self.service_token = settings.auth_service_token
        if self.enabled and not self.service_token and settings.auth_jwt_secret \
                and not settings.auth_jwt_public_key and self.roles.superusers:
            self.service_token = jwt.encode({"sub": sorted(self.roles.superusers)[0]},
                                            settings.auth_jwt_secret, algorithm="HS256")

    def role_of(self, authorization: str | None) -> str:
        """The role a request's Authorization header proves; AuthenticationError if none."""
        if not self.enabled:
            return ANONYMOUS
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthenticationError(
                "authentication is required: send 'Authorization: Bearer <JWT>' "
                "(or 'X-Magnetar-Authorization: Bearer <JWT>' through a proxy that takes "
                "Authorization; client: auth_token=...)")
        token = authorization[7:].strip()
        if len(token) > self.max_token_bytes:
            # Refused before any decoding: base64 and signature work grow with the size.
            raise AuthenticationError(
                f"the bearer token is {len(token)} bytes; tokens over {self.max_token_bytes} "
                "bytes are refused (setting MAGNETAR_AUTH_MAX_TOKEN_BYTES)")
        try:
            claims = jwt.decode(token, self._key, algorithms=self._algorithms,
                                options={"require": ["sub"]})
        except jwt.PyJWTError as exc:
            raise AuthenticationError(f"the bearer token was refused: {exc}") from None
        role = claims["sub"]
        if not isinstance(role, str) or not role:
            raise AuthenticationError("the bearer token's 'sub' (the role) is empty")
        if "\x00" in role or not role.isascii() and not _utf8(role):
            # A role is stored as text (owners, grants): PostgreSQL refuses NUL, and a
            # lone surrogate ("\\ud800" in the JSON) is not UTF-8.
            raise AuthenticationError("the bearer token's 'sub' (the role) contains a NUL "
                                      "character or is not valid Unicode text")
        return role

    def require_superuser(self, what: str) -> None:
        if not self.roles.is_superuser(current_role()):
            raise AuthorizationError(f"{what} needs a superuser role; {current_role()!r} is not one")

    def require_owner_or_superuser(self, owner: str | None, what: str) -> None:
        if not self.roles.may_act_for(current_role(), owner):
            raise AuthorizationError(f"{what}: role {current_role()!r} is neither its owner "
                                     "nor a superuser")

    def own_role(self) -> str:
        """The role this service's own calls act as: its token's (ANONYMOUS when
        authentication is off or it has no token, as such a call would be refused)."""
        if not self.enabled or not self.service_token:
            return ANONYMOUS
        return self.role_of(f"Bearer {self.service_token}")

    def headers(self) -> dict[str, str]:
        """Headers for this service's own calls to other services."""
        return {"authorization": f"Bearer {self.service_token}"} if self.service_token else {}


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class AuthMiddleware:
    """Pure ASGI middleware: the role is set in the request's own task (contextvar)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.auth = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or not self.auth.enabled:
            await self.app(scope, receive, send)
            return
        header = alt = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
            elif name == ALT_AUTHORIZATION:
                alt = value.decode("latin-1")
        if alt is not None:
            header = alt
        try:
            role = self.auth.role_of(header)
            if self.auth.path_rule is not None:
                self.auth.path_rule(self.auth, scope["path"], role)
        except MagnetarError as exc:
            await _send_error(scope, send, exc)
            return
        token = _role.set(role)
        try:
            await self.app(scope, receive, send)
        finally:
            _role.reset(token)


async def _send_error(scope: Scope, send: Send, exc: MagnetarError) -> None:
    content_type, body = error_body(exc, dict(scope["headers"]).get(b"content-type", b"").decode())
    await send({"type": "http.response.start", "status": exc.http_status,
                "headers": [(b"content-type", content_type.encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": body})
