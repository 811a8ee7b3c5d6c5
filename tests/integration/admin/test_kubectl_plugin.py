"""``kubectl magnetar`` (the ``kubectl-magnetar`` console script) against a real Magnetar.

There is no Kubernetes cluster here, so the test stands in for the API server at its
HTTP boundary: a small HTTPS server (self-signed certificate given to the plugin as the
kubeconfig's certificate authority) that authenticates the kubectl user (bearer token or
client certificate, as a real API server does), answers an unknown user 401 and an
unknown Service 404 with Kubernetes ``Status`` objects, and otherwise forwards
``/api/v1/namespaces/NS/services/NAME:http/proxy/...`` to the admin service *without the
Authorization header* (a real API server does not pass it on either).  Everything else is
real: the installed console script (run as a process, as kubectl runs a plugin), the
`kubernetes` client's kubeconfig loading from ``$KUBECONFIG``, and broker, coordinator,
registry and admin service processes with authentication on.  Not checked here: how a
real API server treats ``%2F`` in the proxied path.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest

import magnetar
from magnetar.kubectl_plugin import admin_service_name, main
from magnetar_runtime.local.cluster import command_path

SECRET = "kubectl-plugin-test-secret-of-32-bytes"
CLUSTER_TOKEN = "kubectl-user-token"  # the kubectl user's credential: the API server's business
LIVE_CLUSTER = {"brokers": 1, "coordinators": 1, "registry": True, "admin": True,
                "env": {"MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
                        "MAGNETAR_AUTH_SUPERUSER_ROLES": "ops"}}
PROXY = re.compile(r"^/api/v1/namespaces/([^/]+)/services/([^/:]+):http/proxy(/.*)?$")


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def openssl_pair(folder, name: str):
    key, cert = folder / f"{name}-key.pem", folder / f"{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return key, cert


class StandInApiServer:
    """The API server's service proxy, for one Service (``services`` maps (ns, name) to a URL)."""

    def __init__(self, folder, services: dict[tuple[str, str], str]):
        self.key, self.cert = openssl_pair(folder, "apiserver")
        self.client_key, self.client_cert = openssl_pair(folder, "kubectl-user")
        self.seen: list[dict] = []  # what reached the admin service through the proxy
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _status(self, code: int, reason: str, message: str):
                body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": message, "reason": reason, "code": code}).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _proxy(self):
                by_cert = bool(self.connection.getpeercert())
                if not by_cert and self.headers.get("authorization") != f"Bearer {CLUSTER_TOKEN}":
                    return self._status(401, "Unauthorized", "Unauthorized")
                path, _, query = self.path.partition("?")
                match = PROXY.match(path)
                if not match:
                    return self._status(404, "NotFound", "the server could not find the requested resource")
                ns, name, rest = match.group(1), match.group(2), match.group(3) or "/"
                target = services.get((ns, name))
                if target is None:
                    return self._status(404, "NotFound", f'services "{name}" not found')
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("authorization", "host", "connection", "content-length")}
                outer.seen.append({"path": path, "headers": {k.lower(): v for k, v in headers.items()},
                                   "by_cert": by_cert})
                url = urllib.parse.urlsplit(target)
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
                conn.request(self.command, rest + (f"?{query}" if query else ""), body or None, headers)
                answer = conn.getresponse()
                payload = answer.read()
                self.send_response(answer.status)
                self.send_header("content-type", answer.getheader("content-type", "application/json"))
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                conn.close()

            do_GET = do_POST = do_DELETE = do_PUT = _proxy

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        context.load_verify_locations(self.client_cert)
        context.verify_mode = ssl.CERT_OPTIONAL  # a client certificate, or a bearer token
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture(scope="module")
def apiserver(live, tmp_path_factory):
    server = StandInApiServer(tmp_path_factory.mktemp("apiserver"),
                              {("prod", admin_service_name("events")): live.admin_url,
                               ("magnetar", admin_service_name("magnetar")): live.admin_url})
    yield server
    server.close()


def b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path, apiserver: StandInApiServer, current: str = "token") -> str:
    """Two contexts: ``token`` (bearer token, namespace prod; CA inline) and ``cert``
    (client certificate files, no namespace).  JSON is YAML, so this is a kubeconfig."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "standin", "cluster": {
            "server": apiserver.url, "certificate-authority-data": b64(apiserver.cert)}}],
        "users": [{"name": "by-token", "user": {"token": CLUSTER_TOKEN}},
                  {"name": "by-cert", "user": {"client-certificate": str(apiserver.client_cert),
                                               "client-key": str(apiserver.client_key)}}],
        "contexts": [{"name": "token", "context": {"cluster": "standin", "user": "by-token",
                                                   "namespace": "prod"}},
                     {"name": "cert", "context": {"cluster": "standin", "user": "by-cert"}}],
    }
    path.write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="module")
def keys(live):
    """Two transaction keys of role ``billing``, connected through the real registry."""
    clients = [magnetar.Client(live.service_url, transaction_key=k, auth_token=token("billing"))
               for k in ("orders-daily", "refunds")]
    try:
        for c in clients:
            c.connect_transaction_key()
    finally:
        for c in clients:
            c.close()
    return ["orders-daily", "refunds"]


def plugin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("KUBECONFIG", "MAGNETAR_AUTH_TOKEN", "MAGNETAR_ADMIN_URL", "MAGNETAR_RELEASE")}
    return subprocess.run([command_path("kubectl-magnetar"), *args], env=clean | env,
                          capture_output=True, text=True, timeout=60)


def test_list_transaction_keys_through_the_api_server_proxy(live, apiserver, keys, tmp_path):
    env = {"KUBECONFIG": kubeconfig(tmp_path / "config", apiserver), "MAGNETAR_AUTH_TOKEN": token("ops")}
    before = len(apiserver.seen)
    done = plugin("--release", "events", "transactions", "list-transaction-keys", "-o", "json", env=env)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)["transactionKeys"]
    assert sorted(k["transactionKey"] for k in listed) == keys
    assert {k["owner"] for k in listed} == {"billing"}
    # It went through the proxy path of the context's namespace and the chart's Service
    # name, with the Magnetar token in the header the proxy leaves alone.
    request = apiserver.seen[before]
    assert request["path"] == ("/api/v1/namespaces/prod/services/events-magnetar-admin:http/proxy"
                               "/admin/v2/transactions/transaction-keys")
    assert request["headers"]["x-magnetar-authorization"] == f"Bearer {token('ops')}"
    assert not request["by_cert"]

    table = plugin("--release", "events", "transactions", "list-transaction-keys", env=env)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["OWNER", "KEY", "EPOCH"]
    assert "orders-daily" in table.stdout and "refunds" in table.stdout


def test_without_the_magnetar_token_the_admin_service_refuses(live, apiserver, keys, tmp_path):
    env = {"KUBECONFIG": kubeconfig(tmp_path / "config", apiserver)}
    done = plugin("--release", "events", "transactions", "list-transaction-keys", env=env)
    assert done.returncode == 1
    assert "AuthenticationError" in done.stderr
    # A non-superuser's token gets through the proxy and is judged by Magnetar: it may
    # list its own keys, not the tenants.
    done = plugin("--release", "events", "--auth-token", token("billing"), "tenants", "list", env=env)
    assert done.returncode == 1 and "AuthorizationError" in done.stderr


def test_context_namespace_and_kubeconfig_list_flags(live, apiserver, keys, tmp_path):
    """--context picks the client-certificate user; -n/--namespace overrides the context's;
    KUBECONFIG may list several files (a missing one is skipped, as kubectl does)."""
    first = kubeconfig(tmp_path / "a", apiserver, current="token")
    env = {"KUBECONFIG": os.pathsep.join([str(tmp_path / "missing"), first]),
           "MAGNETAR_AUTH_TOKEN": token("ops")}
    before = len(apiserver.seen)
    done = plugin("transactions", "get-transaction-key", "refunds", "--owner", "billing", "--context", "cert",
                  "-n", "magnetar", "-o", "json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["transactionKey"] == "refunds"
    request = apiserver.seen[before]
    assert request["by_cert"]
    assert request["path"].startswith("/api/v1/namespaces/magnetar/services/magnetar-admin:http/proxy/")


def test_kubeconfig_and_cluster_refusals_are_clear(live, apiserver, tmp_path):
    env = {"KUBECONFIG": kubeconfig(tmp_path / "config", apiserver), "MAGNETAR_AUTH_TOKEN": token("ops")}
    done = plugin("--context", "nope", "tenants", "list", env=env)
    assert done.returncode == 2 and "no context 'nope'" in done.stderr and "cert, token" in done.stderr
    done = plugin("tenants", "list", env={"KUBECONFIG": str(tmp_path / "absent")})
    assert done.returncode == 2 and "no kubeconfig" in done.stderr
    # The release is not in that namespace: the API server's own 404 message is shown.
    done = plugin("--release", "other", "tenants", "list", env=env)
    assert done.returncode == 1 and 'services \\"other-magnetar-admin\\" not found' not in done.stderr
    assert 'services "other-magnetar-admin" not found' in done.stderr
    # A kubeconfig user the API server does not know.
    (tmp_path / "bad").write_text((tmp_path / "config").read_text().replace(CLUSTER_TOKEN, "stolen"))
    done = plugin("tenants", "list", env={"KUBECONFIG": str(tmp_path / "bad")})
    assert done.returncode == 1 and "Unauthorized" in done.stderr
    done = plugin("--admin-url", "http://x", "tenants", "list", env=env)
    assert done.returncode == 2 and "--admin-url is not used here" in done.stderr


def test_help_needs_no_kubeconfig():
    done = plugin("--help", env={"KUBECONFIG": "/nonexistent"})
    assert done.returncode == 0 and "--release" in done.stdout and "magnetar-admin" in done.stdout
    done = plugin("transactions", "--help", env={"KUBECONFIG": "/nonexistent"})
    assert done.returncode == 0 and "list-transaction-keys" in done.stdout


def test_release_names_follow_the_chart():
    assert admin_service_name("magnetar") == "magnetar-admin"
    assert admin_service_name("prod-magnetar-eu") == "prod-magnetar-eu-admin"
    assert admin_service_name("events") == "events-magnetar-admin"
    assert admin_service_name("x" * 50) == "x" * 40 + "-admin"
    assert admin_service_name("a" * 38 + "--magnetar") == "a" * 38 + "--admin"  # one '-' trimmed


def test_without_the_kubernetes_client_the_fix_is_named(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if the [kubectl] extra were missing
    (tmp_path / "config").write_text("{}")
    assert main(["--kubeconfig", str(tmp_path / "config"), "tenants", "list"]) == 2
    assert "pip install 'magnetar[kubectl]'" in capsys.readouterr().err
