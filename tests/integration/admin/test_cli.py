"""``magnetar-admin`` run as a subprocess (the installed console script) against a running
admin service: table and JSON output, the bearer token, and exit codes 0 (done), 1
(refused, reason and fix on stderr), 2 (usage) and 3 (cannot connect, or the service
failed).  The transaction commands: test_cli_transactions.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import magnetar
from magnetar_runtime.local.cluster import command_path
from magnetar_runtime.local.postgres import free_port
from tests.integration.admin.conftest import Admin, start_admin

# test_brokers needs real brokers; the other tests use an admin service on a fresh database.
LIVE_CLUSTER = {"brokers": 1, "coordinators": 0, "registry": False, "admin": False}

CLI = command_path("magnetar-admin")


def cli(*args: str, url: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("MAGNETAR_ADMIN_URL", "MAGNETAR_AUTH_TOKEN")}
    argv = [CLI] + (["--admin-url", url] if url else []) + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=base | (env or {}))


def ok(admin, *args: str) -> str:
    p = cli(*args, url=admin.url)
    assert p.returncode == 0, f"magnetar-admin {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def js(admin, *args: str):
    return json.loads(ok(admin, "--output", "json", *args))


def refused(admin, *args: str) -> str:
    before = admin.snapshot()
    p = cli(*args, url=admin.url)
    assert p.returncode == 1, f"magnetar-admin {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert p.stdout == ""
    assert admin.snapshot() == before
    return p.stderr


def usage(*args: str, url: str = "http://127.0.0.1:9") -> str:
    p = cli(*args, url=url)
    assert p.returncode == 2, f"magnetar-admin {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stderr


def test_tenants_and_namespaces(admin):
    assert ok(admin, "tenants", "list").split() == ["TENANT", "public"]
    assert ok(admin, "tenants", "create", "acme", "--admin-roles", "ops,dev").strip() == "Created tenant acme"
    assert js(admin, "tenants", "list") == ["acme", "public"]
    assert js(admin, "tenants", "get", "acme") == {"adminRoles": ["dev", "ops"], "allowedClusters": ["standalone"]}
    assert js(admin, "namespaces", "create", "acme/orders") == {"result": "ok", "namespace": "acme/orders"}
    assert ok(admin, "namespaces", "list", "acme").split() == ["NAMESPACE", "acme/orders"]
    assert ok(admin, "namespaces", "get-deduplication", "acme/orders").strip() == "broker default (not set)"
    ok(admin, "namespaces", "set-deduplication", "acme/orders", "--disable")
    assert admin.sql("SELECT deduplication_enabled FROM namespaces WHERE tenant = 'acme'") == [
        {"deduplication_enabled": False}]
    assert js(admin, "namespaces", "get-deduplication", "acme/orders") is False
    ok(admin, "namespaces", "set-deduplication", "acme/orders", "--enable")
    assert ok(admin, "namespaces", "get-deduplication", "acme/orders").strip() == "enabled"
    ok(admin, "namespaces", "remove-deduplication", "acme/orders")
    assert js(admin, "namespaces", "get-deduplication", "acme/orders") is None
    ok(admin, "namespaces", "delete", "acme/orders")
    ok(admin, "tenants", "delete", "acme")
    assert admin.sql("SELECT tenant FROM tenants") == [{"tenant": "public"}]


def test_topics(admin):
    assert "with 3 partitions" in ok(admin, "topics", "create", "orders", "-p", "3")
    assert js(admin, "topics", "create", "public/default/solo") == {
        "result": "ok", "topic": "persistent://public/default/solo", "partitions": 0}
    listed = ok(admin, "topics", "list", "public/default").split()
    assert listed == ["TOPIC"] + [f"persistent://public/default/orders-partition-{i}" for i in range(3)] + [
        "persistent://public/default/solo"]
    assert js(admin, "topics", "list", "public/default", "--partitioned") == ["persistent://public/default/orders"]
    assert js(admin, "namespaces", "topics", "public/default")[-1] == "persistent://public/default/solo"

    admin.sql("INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry) SELECT topic_id, 'audit', -1 "
              "FROM topics WHERE topic LIKE '%orders-partition-%'")
    table = ok(admin, "topics", "stats", "orders")
    assert "(3 partitions)" in table and "persistent://public/default/orders-partition-2" in table
    assert [line.split()[0] for line in table.splitlines() if line.startswith("audit")] == ["audit"]
    stats = js(admin, "topics", "stats", "orders")
    assert stats["metadata"] == {"partitions": 3} and "audit" in stats["subscriptions"]
    assert js(admin, "topics", "stats", "persistent://public/default/solo")["liveStats"] is False
    assert "database-only stats" in ok(admin, "topics", "stats", "solo")
    lines = ok(admin, "topics", "stats-internal", "solo").splitlines()
    assert ["lastConfirmedEntry", "-1:-1"] in [line.split() for line in lines]
    internal = js(admin, "topics", "stats-internal", "orders")
    assert len(internal["partitions"]) == 3
    assert ok(admin, "topics", "subscriptions", "orders").split() == ["SUBSCRIPTION", "audit"]
    ok(admin, "topics", "unsubscribe", "orders", "-s", "audit")
    assert admin.sql("SELECT count(*) AS n FROM subscriptions") == [{"n": 0}]

    assert "and its 3 partitions" in ok(admin, "topics", "delete", "orders")
    assert js(admin, "topics", "delete", "solo") == {
        "result": "ok", "topic": "persistent://public/default/solo", "partitions": 0}
    assert admin.sql("SELECT count(*) AS n FROM topics") == [{"n": 0}]
    assert admin.sql("SELECT count(*) AS n FROM partitioned_topics") == [{"n": 0}]


def test_brokers(live, live_admin):
    admin, topic = live_admin, "persistent://public/default/cli-owned"
    admin.ok("PUT", "/admin/v2/persistent/public/default/cli-owned")
    client = magnetar.Client(live.service_url)
    try:
        client.create_producer(topic).send(b"x")  # the broker takes the topic's lease
    finally:
        client.close()
    owner = live.owner_of(topic)
    assert ok(admin, "brokers", "list").split() == ["BROKER", "URL", live.url("broker-0")]
    rows = [r for r in js(admin, "brokers", "ownership") if r["topic"] == topic]
    assert [(r["brokerId"], r["brokerUrl"], r["brokerAlive"]) for r in rows] == [
        (owner, live.url(owner), True)]
    assert rows[0]["ownerEpoch"] >= 1
    assert any(line.split()[:2] == [topic, owner] for line in ok(admin, "brokers", "ownership").splitlines())


def test_refusals_exit_1_with_the_reason_and_a_fix(admin):
    admin.ok("PUT", "/admin/v2/persistent/public/default/solo")
    err = refused(admin, "topics", "stats", "nope")
    assert "persistent://public/default/nope does not exist" in err and "HTTP 404 TopicNotFound" in err
    assert "magnetar-admin topics create nope" in err
    err = refused(admin, "topics", "create", "acme/orders/t")
    assert "namespace acme/orders does not exist" in err and "namespaces create acme/orders" in err
    err = refused(admin, "namespaces", "create", "acme/orders")
    assert "tenant 'acme' does not exist" in err and "tenants create acme" in err
    err = refused(admin, "tenants", "create", "public")
    assert "already exists" in err and "HTTP 409" in err
    err = refused(admin, "namespaces", "delete", "public/default")
    assert "force" in err and "--force" in err
    err = refused(admin, "topics", "unsubscribe", "solo", "-s", "ghost")
    assert "'ghost'" in err and "topics subscriptions solo" in err
    err = refused(admin, "tenants", "create", "zeta", "--allowed-clusters", "elsewhere")
    assert "elsewhere" in err and "HTTP 400" in err


def test_usage_errors_exit_2():
    assert "required" in usage()
    assert "invalid choice" in usage("planets", "list")
    assert "invalid topic 'bad$name'" in usage("topics", "create", "bad$name")
    assert "at least 1" in usage("topics", "create", "t", "-p", "0")
    assert "invalid int value" in usage("topics", "create", "t", "-p", "many")
    assert "TENANT/NAMESPACE" in usage("namespaces", "create", "justone")
    assert "--enable" in usage("namespaces", "set-deduplication", "public/default")
    assert "not an http" in usage("tenants", "list", url="localhost:8081")
    assert "invalid choice" in usage("--output", "yaml", "tenants", "list")


def test_cannot_connect_exits_3_naming_the_url_and_the_fix():
    url = f"http://127.0.0.1:{free_port()}"
    p = cli("tenants", "list", url=url)
    assert p.returncode == 3
    assert url in p.stderr and "--admin-url" in p.stderr and "MAGNETAR_ADMIN_URL" in p.stderr
    p = cli("tenants", "list", env={"MAGNETAR_ADMIN_URL": url})  # the environment's URL is used
    assert p.returncode == 3 and url in p.stderr


def test_url_from_environment_and_options_after_the_command(admin):
    p = cli("tenants", "list", "--output", "json", env={"MAGNETAR_ADMIN_URL": admin.url})
    assert p.returncode == 0 and json.loads(p.stdout) == ["public"]


SECRET = "cli-test-secret-of-at-least-32-bytes"


def token(role: str) -> str:
    import jwt

    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


@pytest.fixture
def secured_admin(database_url):
    server, settings = start_admin(database_url, auth_enabled=True, auth_jwt_secret=SECRET,
                                   auth_superuser_roles="ops")
    yield Admin(server, database_url, settings)
    server.stop()


def test_auth_token_is_sent_as_a_bearer_token(secured_admin):
    admin = secured_admin
    p = cli("tenants", "list", url=admin.url)
    assert p.returncode == 1 and "AuthenticationError" in p.stderr and "--auth-token" in p.stderr
    p = cli("--auth-token", token("ops"), "tenants", "list", url=admin.url)
    assert (p.returncode, p.stdout.split()) == (0, ["TENANT", "public"])
    p = cli("tenants", "list", url=admin.url, env={"MAGNETAR_AUTH_TOKEN": token("ops")})
    assert p.returncode == 0, p.stderr
    p = cli("tenants", "list", "--auth-token", token("intern"), url=admin.url)  # after the command too
    assert p.returncode == 1 and "AuthorizationError" in p.stderr and "superuser" in p.stderr
    p = cli("--auth-token", "not-a-jwt", "tenants", "list", url=admin.url)
    assert p.returncode == 1 and "HTTP 401" in p.stderr


def test_a_failing_admin_service_exits_3_with_its_reason(postgres):
    import asyncio

    from magnetar_storage.migrate import migrate

    url = postgres.create_database("t_cli_failing_admin")
    asyncio.run(migrate(url))
    server, _ = start_admin(url)
    try:
        assert cli("tenants", "list", url=server.url).returncode == 0
        postgres.drop_database("t_cli_failing_admin")  # its database goes away under it
        p = cli("tenants", "list", url=server.url)
        assert p.returncode == 3, p.stderr
        assert f"the admin service at {server.url} failed" in p.stderr and "HTTP 5" in p.stderr
        assert "readyz" in p.stderr
    finally:
        server.stop()


def test_something_that_is_not_http_exits_3(postgres):
    url = f"http://127.0.0.1:{postgres.port}"  # PostgreSQL does not speak HTTP
    p = cli("tenants", "list", url=url)
    assert p.returncode == 3 and url in p.stderr and "--admin-url" in p.stderr


def test_permission_commands_for_superusers_and_tenant_admins(secured_admin):
    admin = secured_admin

    def as_role(role: str, *args: str) -> subprocess.CompletedProcess:
        return cli("--auth-token", token(role), *args, url=admin.url)

    assert as_role("ops", "tenants", "create", "acme", "--admin-roles", "acme-ops").returncode == 0
    assert as_role("ops", "namespaces", "create", "acme/app").returncode == 0
    # The tenant's admin (not a superuser) manages the tenant's permissions.
    p = as_role("acme-ops", "namespaces", "grant-permission", "acme/app", "--role", "app",
                "--actions", "produce,consume")
    assert p.returncode == 0, p.stderr
    p = as_role("acme-ops", "-o", "json", "namespaces", "permissions", "acme/app")
    assert json.loads(p.stdout) == {"app": ["consume", "produce"]}
    assert as_role("acme-ops", "namespaces", "permissions", "acme/app").stdout.split() == [
        "NAME", "GRANTED", "app", "consume,produce"]
    p = as_role("acme-ops", "namespaces", "grant-subscription-permission", "acme/app",
                "--subscription", "billing", "--roles", "app,audit")
    assert p.returncode == 0, p.stderr
    p = as_role("acme-ops", "-o", "json", "namespaces", "subscription-permissions", "acme/app")
    assert json.loads(p.stdout) == {"billing": ["app", "audit"]}
    p = as_role("acme-ops", "namespaces", "revoke-subscription-permission", "acme/app",
                "--subscription", "billing", "--role", "audit")
    assert p.returncode == 0, p.stderr
    p = as_role("acme-ops", "topics", "grant-permission", "acme/app/orders", "--role", "audit",
                "--actions", "consume")
    assert p.returncode == 0, p.stderr
    p = as_role("acme-ops", "-o", "json", "topics", "permissions", "acme/app/orders")
    assert json.loads(p.stdout) == {"audit": ["consume"]}
    assert as_role("acme-ops", "topics", "revoke-permission", "acme/app/orders", "--role",
                   "audit").returncode == 0
    assert as_role("acme-ops", "namespaces", "revoke-permission", "acme/app", "--role", "app").returncode == 0
    assert admin.sql("SELECT role FROM namespace_permissions") == []
    assert admin.sql("SELECT roles FROM subscription_permissions") == [{"roles": ["app"]}]
    # Others may not, and a refusal changes nothing.
    before = admin.snapshot()
    for role in ("app", "other-ops"):
        p = as_role(role, "namespaces", "grant-permission", "acme/app", "--role", role,
                    "--actions", "produce")
        assert p.returncode == 1 and "AuthorizationError" in p.stderr and "adminRoles" in p.stderr
        assert as_role(role, "namespaces", "permissions", "acme/app").returncode == 1
    # Bad input: a usage error before anything is sent, or a 400 from the service.
    p = as_role("acme-ops", "namespaces", "grant-permission", "acme/app", "--role", "x",
                "--actions", "produce,functions")
    assert p.returncode == 2 and "--actions" in p.stderr
    p = as_role("acme-ops", "namespaces", "grant-permission", "acme/app", "--role", "a\x01b",
                "--actions", "produce")
    assert p.returncode == 1 and "control character" in p.stderr
    assert admin.snapshot() == before


def test_permission_endpoints_refuse_bad_input_and_change_nothing(admin):
    admin.ok("PUT", "/admin/v2/tenants/acme")
    admin.ok("PUT", "/admin/v2/namespaces/acme/app")
    base = "/admin/v2/namespaces/acme/app/permissions"
    for body in (["produce", "sinks"], [], "produce", {"actions": ["produce"]}, [None]):
        admin.refused("POST", base + "/app", body, status=400, code="BadRequest")
    admin.refused("POST", base + "/a%00b", ["produce"], status=400, code="BadRequest")
    admin.refused("POST", base + "/" + "r" * 256, ["produce"], status=400, code="BadRequest")
    admin.refused("POST", base + "/subscription/billing", [], status=400)
    admin.refused("POST", base + "/subscription/billing", ["ok", "bad\x00"], status=400)
    admin.refused("POST", base + "/subscription/bad..name", ["app"], status=400)
    admin.refused("POST", "/admin/v2/namespaces/acme/nope/permissions/app", ["produce"], status=404)
    admin.refused("DELETE", base + "/billing/app", status=404)  # billing has no list
    admin.refused("POST", "/admin/v2/persistent/acme/app/orders/permissions/app", ["own"], status=400)
    admin.refused("PUT", "/admin/v2/persistent/acme/app/x-partition--1", status=400)
    admin.refused("PUT", "/admin/v2/persistent/acme/app/-", status=400)
