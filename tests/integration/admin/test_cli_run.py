"""``magnetar.admin_cli.run(argv, *, headers, ssl)``: what another program (the kubectl
plugin) relies on when it calls the CLI in-process: exit codes returned instead of
raised, its headers on every request, its TLS context for an https admin URL; against
the admin service for real (authentication on, or served over TLS)."""

from __future__ import annotations

import json
import ssl
import subprocess

import jwt
import pytest

from magnetar.admin_cli import main, run
from magnetar_admin.app import build_app
from magnetar_admin.settings import AdminSettings
from magnetar_runtime.local.postgres import free_port
from tests.integration.admin.conftest import ServerThread, start_admin

SECRET = "run-test-secret-of-at-least-32-bytes"


def _token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def test_headers_go_with_every_request_and_win_over_the_cli_own(database_url, capsys):
    server, _ = start_admin(database_url, auth_enabled=True, auth_jwt_secret=SECRET,
                            auth_superuser_roles="ops")
    try:
        url = ["--admin-url", server.url, "-o", "json"]
        assert run([*url, "tenants", "list"]) == 1
        assert "AuthenticationError" in capsys.readouterr().err
        assert run([*url, "tenants", "list"], headers={"Authorization": f"Bearer {_token('ops')}"}) == 0
        assert json.loads(capsys.readouterr().out) == ["public"]
        # A proxy's credentials given as headers replace --auth-token's header.
        assert run([*url, "--auth-token", "stale", "tenants", "create", "via-headers"],
                   headers={"authorization": f"Bearer {_token('ops')}"}) == 0
        assert json.loads(capsys.readouterr().out) == {"result": "ok", "tenant": "via-headers"}
        assert run([*url, "tenants", "list"], headers={"Authorization": f"Bearer {_token('intern')}"}) == 1
        assert "AuthorizationError" in capsys.readouterr().err
    finally:
        server.stop()


@pytest.fixture
def tls_admin(database_url, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    settings = AdminSettings(database_url=database_url, port=free_port())
    server = ServerThread(build_app(settings), settings.port, ssl_keyfile=str(key),
                          ssl_certfile=str(cert)).start()
    yield server, cert
    server.stop()


def test_ssl_context_is_used_for_an_https_admin_url(tls_admin, capsys):
    server, cert = tls_admin
    assert server.url.startswith("https://")
    argv = ["--admin-url", server.url, "-o", "json", "tenants", "list"]
    assert run(argv, ssl=ssl.create_default_context(cafile=str(cert))) == 0
    assert json.loads(capsys.readouterr().out) == ["public"]
    # Without the context the self-signed certificate is not trusted: cannot connect.
    assert run(argv) == 3
    err = capsys.readouterr().err
    assert "CERTIFICATE_VERIFY_FAILED" in err and server.url in err


def test_usage_errors_and_help_are_returned_not_raised(capsys):
    assert run(["topics", "create"]) == 2
    assert "TOPIC" in capsys.readouterr().err
    assert run(["--help"]) == 0
    assert "Exit codes: 0 ok; 1 refused" in capsys.readouterr().out
    assert run(["--admin-url", "ftp://x", "tenants", "list"]) == 2
    assert "not an http:// or https:// URL" in capsys.readouterr().err


def test_main_runs_argv(database_url, capsys, monkeypatch):
    server, _ = start_admin(database_url)
    try:
        monkeypatch.setattr("sys.argv", ["magnetar-admin", "--admin-url", server.url, "-o", "json",
                                         "tenants", "list"])
        assert main() == 0
        assert json.loads(capsys.readouterr().out) == ["public"]
    finally:
        server.stop()
