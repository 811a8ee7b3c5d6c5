"""The admin service over HTTP (urllib: the CLI stays standard-library only) and the
three ways a command ends badly: a usage error, a refusal, an unreachable service."""

from __future__ import annotations

import http.client
import json
import socket
import ssl as _ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:8081"
NO_BODY = object()


class UsageError(Exception):
    """Bad arguments, found before anything is sent (exit 2)."""


class Refused(Exception):
    """The admin service (or a proxy in front of it) answered with an error status."""

    def __init__(self, status: int, code: str, reason: str):
        super().__init__(reason)
        self.status, self.code, self.reason = status, code, reason

    @property
    def server_side(self) -> bool:
        # A 5xx says nothing about the request: the service (or the proxy in front of
        # it) is broken or not ready, and the same command may work later.
        return self.status >= 500


class Unreachable(Exception):
    """No HTTP answer at all: refused connection, DNS, TLS, timeout."""


class BadAnswer(Exception):
    """Something answered, but not as the admin service does (not JSON)."""


def q(part: str) -> str:
    """One URL path segment: '/', spaces, '%' and non-ASCII are all escaped."""
    return urllib.parse.quote(part, safe="")


class AdminApi:
    """``request(method, path, body, query)`` -> the decoded JSON answer (None when empty).

    ``headers`` are added to every request and win over the CLI's own of the same name
    (a kubectl plugin sends its API-server credentials this way); ``ssl`` is the TLS
    context for an https:// admin URL."""

    def __init__(self, base_url: str, auth_token: str | None = None, timeout: float = 30.0,
                 headers: dict | None = None, ssl: _ssl.SSLContext | None = None):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UsageError(f"--admin-url {base_url!r} is not an http:// or https:// URL "
                             f"(e.g. {DEFAULT_ADMIN_URL})")
        # A path is kept: behind the Kubernetes API-server proxy the service lives under
        # /api/v1/namespaces/NS/services/NAME:PORT/proxy.
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.ssl = ssl
        self.headers = {"accept": "application/json"}
        if auth_token:
            self.headers["authorization"] = f"Bearer {auth_token}"
        for name, value in (headers or {}).items():
            self.headers[name.lower()] = value

    def request(self, method: str, path: str, body: Any = NO_BODY, query: dict | None = None) -> Any:
        query = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = dict(self.headers)
        data = None
        if body is not NO_BODY:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise refusal(err.code, err.read()) from None
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            text = str(reason)
            raise Unreachable(f"{type(reason).__name__}: {text}" if text else type(reason).__name__) from None
        if not payload:
            return None
        try:
            return json.loads(payload)
        except ValueError:
            raise BadAnswer(f"{method} {url} answered something that is not JSON: {payload[:200]!r}") from None


def refusal(status: int, payload: bytes) -> Refused:
    """The service's {"reason", "code"}; FastAPI's {"detail"}; or a proxy's text page."""
    try:
        answer = json.loads(payload)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("kind") == "Status" and answer.get("message"):
        # The Kubernetes API server's own refusal (kubectl plugin): its `reason` is a bare
        # word such as NotFound, the sentence is in `message`.
        return Refused(status, str(answer.get("reason") or ""), str(answer["message"]))
    if isinstance(answer, dict) and ("reason" in answer or "detail" in answer):
        reason = answer.get("reason") or answer.get("detail")
        return Refused(status, str(answer.get("code") or ""),
                       reason if isinstance(reason, str) else json.dumps(reason))
    text = payload.decode(errors="replace").strip()[:300]
    return Refused(status, "", text or http.client.responses.get(status, "error"))
