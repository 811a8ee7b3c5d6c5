"""The admin's schema routes and namespace schema policies with a real broker (in this
process, on its own port: the registry is the brokers', the admin calls one) and
``magnetar-admin schemas ...`` / ``namespaces ...-schema-...``: upload, get (latest, a
version, every version), the compatibility test, the version of a schema, delete (a
deletion version; forced: the history), KEY_VALUE's body, refusals that change nothing."""

from __future__ import annotations

import json

import pytest

from magnetar_broker.app import build_app as build_broker
from magnetar_broker.settings import BrokerSettings
from magnetar_runtime.local.postgres import free_port
from tests.integration.admin.conftest import ServerThread, http
from tests.waiting import wait_until

NS = "/admin/v2/namespaces/public/default"
S = "/admin/v2/schemas/public/default"


def avro(*fields: tuple[str, str], name: str = "User") -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": n, "type": ["null", t], "default": None} for n, t in fields]})


V1 = {"type": "AVRO", "schema": avro(("name", "string")), "properties": {"owner": "billing"}}
V2 = {"type": "AVRO", "schema": avro(("name", "string"), ("age", "int"))}
RETYPED = {"type": "AVRO", "schema": avro(("name", "int"))}


@pytest.fixture
def broker(database_url):
    settings = BrokerSettings(database_url=database_url, port=free_port(), broker_id="broker-schemas",
                              heartbeat_interval_ms=200, lease_ttl_ms=2000, db_pool_size=4)
    server = ServerThread(build_broker(settings), settings.port).start()
    wait_until(lambda: http("GET", server.url + "/readyz")[0] == 200, 20, "the broker to be ready")
    yield server
    server.stop()




def test_upload_get_versions_compatibility_and_delete(admin, broker):
    assert admin.ok("POST", f"{S}/users/schema", V1) == {"version": 0}
    assert admin.ok("POST", f"{S}/users/schema", V1) == {"version": 0}       # identical: its version
    assert admin.ok("POST", f"{S}/users/schema", V2) == {"version": 1}
    latest = admin.ok("GET", f"{S}/users/schema")
    assert (latest["version"], latest["type"], json.loads(latest["data"])) == (1, "AVRO", json.loads(V2["schema"]))
    assert latest["timestamp"] > 1_700_000_000_000
    first = admin.ok("GET", f"{S}/users/schema/0")
    assert (first["data"], first["properties"]) == (V1["schema"], {"owner": "billing"})
    assert [v["version"] for v in admin.ok("GET", f"{S}/users/schemas")["getSchemaResponses"]] == [0, 1]

    assert admin.ok("POST", f"{S}/users/compatibility", V1) == {
        "isCompatibility": True, "schemaCompatibilityStrategy": "FULL", "reason": None}
    refused = admin.ok("POST", f"{S}/users/compatibility", RETYPED)
    assert refused["isCompatibility"] is False and "name" in refused["reason"]
    assert admin.ok("POST", f"{S}/users/version", V1) == {"version": 0}
    assert admin.refused("POST", f"{S}/users/version", RETYPED, status=404)

    reason = admin.refused("POST", f"{S}/users/schema", RETYPED, status=409, code="IncompatibleSchema")
    assert "FULL" in reason and "name" in reason

    assert admin.ok("DELETE", f"{S}/users/schema") == {"version": 2}
    assert "deleted" in admin.refused("GET", f"{S}/users/schema", status=404)
    assert admin.ok("GET", f"{S}/users/schema/1")["version"] == 1         # history stays readable
    assert admin.ok("GET", f"{S}/users/schemas") == {"getSchemaResponses": []}
    assert admin.ok("POST", f"{S}/users/schema", RETYPED) == {"version": 3}  # nothing to be compatible with
    assert admin.ok("DELETE", f"{S}/users/schema?force=true") == {"version": 0}
    assert admin.sql("SELECT count(*) AS n FROM schemas") == [{"n": 0}]
    assert admin.refused("DELETE", f"{S}/users/schema", status=404)


def test_key_value_schemas_show_their_parts(admin, broker):
    body = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": json.loads(V1["schema"])}),
            "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO"}}
    assert admin.ok("POST", f"{S}/kv/schema", body) == {"version": 0}
    got = admin.ok("GET", f"{S}/kv/schema")
    assert got["type"] == "KEY_VALUE" and json.loads(got["data"]) == {"key": "", "value": json.loads(V1["schema"])}


@pytest.mark.parametrize("body, status, why", [
    ({"type": "AVRO", "schema": "{not json"}, 400, "must be JSON"),
    ({"type": "XML", "schema": "<a/>"}, 400, "unknown schema type"),
    ({"type": "BYTES"}, 400, "no schema"),
    ("not an object", 400, "the body must be"),
])
def test_bad_uploads_are_refused_and_change_nothing(admin, broker, body, status, why):
    assert why in admin.refused("POST", f"{S}/t/schema", body, status=status)


def test_routes_of_a_missing_namespace_and_topic(admin, broker):
    assert admin.refused("GET", f"{S}/none/schema", status=404)
    assert "does not exist" in admin.refused("POST", "/admin/v2/schemas/public/nope/t/schema", V1, status=404)
    assert admin.refused("GET", "/admin/v2/namespaces/public/nope/schemaCompatibilityStrategy", status=404)


def test_namespace_schema_policies(admin, broker):
    assert admin.ok("GET", f"{NS}/schemaCompatibilityStrategy") == "UNDEFINED"
    assert admin.ok("GET", f"{NS}/isAllowAutoUpdateSchema") is None
    assert admin.ok("GET", f"{NS}/schemaValidationEnforced") is None
    admin.ok("PUT", f"{NS}/schemaCompatibilityStrategy", "always_incompatible")
    admin.ok("POST", f"{NS}/isAllowAutoUpdateSchema", False)
    admin.ok("POST", f"{NS}/schemaValidationEnforced", True)
    policies = admin.ok("GET", NS)
    assert (policies["schema_compatibility_strategy"], policies["is_allow_auto_update_schema"],
            policies["schema_validation_enforced"]) == ("ALWAYS_INCOMPATIBLE", False, True)
    assert admin.ok("POST", f"{S}/t/schema", V1) == {"version": 0}   # an upload ignores auto-update
    assert "ALWAYS_INCOMPATIBLE" in admin.refused("POST", f"{S}/t/schema", V2, status=409)
    assert admin.ok("POST", f"{S}/t/compatibility", V2)["schemaCompatibilityStrategy"] == "ALWAYS_INCOMPATIBLE"
    assert "one of" in admin.refused("PUT", f"{NS}/schemaCompatibilityStrategy", "SOMETIMES")
    assert admin.refused("POST", f"{NS}/schemaValidationEnforced", "yes")
    admin.ok("PUT", f"{NS}/schemaCompatibilityStrategy", "UNDEFINED")
    admin.ok("DELETE", f"{NS}/isAllowAutoUpdateSchema")
    assert admin.ok("GET", f"{NS}/schemaCompatibilityStrategy") == "UNDEFINED"
    assert admin.ok("GET", f"{NS}/isAllowAutoUpdateSchema") is None
    assert admin.ok("POST", f"{S}/t/schema", V2) == {"version": 1}   # FULL again


def test_cli_schemas_and_namespace_policies(admin, broker, cli, tmp_path):
    v1, retyped, garbage = tmp_path / "v1.json", tmp_path / "retyped.json", tmp_path / "garbage.json"
    v1.write_text(json.dumps(V1 | {"schema": json.loads(V1["schema"])}))   # the definition as an object
    retyped.write_text(json.dumps(RETYPED))
    garbage.write_text("{nope")
    code, out, err = cli("schemas", "upload", "public/default/users", "-f", str(v1))
    assert (code, out) == (0, "Schema of public/default/users at version 0\n"), err
    code, out, _ = cli("schemas", "get", "users")
    assert code == 0 and "AVRO" in out and '"name": "User"' in out
    code, out, _ = cli("-o", "json", "schemas", "get", "users", "--version", "0")
    assert code == 0 and json.loads(out)["properties"] == {"owner": "billing"}
    code, out, _ = cli("schemas", "compatibility", "users", "-f", str(retyped))
    assert code == 0 and out.startswith("INCOMPATIBLE under FULL")
    code, out, err = cli("schemas", "upload", "users", "-f", str(retyped))
    assert (code, out) == (1, "") and "incompatible" in err.lower(), err
    assert cli("schemas", "upload", "users", "-f", str(garbage))[0] == 2
    code, out, _ = cli("-o", "json", "schemas", "get", "users", "--all-versions")
    assert code == 0 and [v["version"] for v in json.loads(out)] == [0]
    code, out, _ = cli("schemas", "delete", "users")
    assert (code, out) == (0, "Deleted the schema of users (deletion at version 1)\n")
    assert cli("schemas", "delete", "users", "--force")[0] == 0
    assert admin.sql("SELECT count(*) AS n FROM schemas") == [{"n": 0}]

    assert cli("namespaces", "set-schema-compatibility-strategy", "public/default", "-c", "forward")[0] == 0
    assert cli("namespaces", "get-schema-compatibility-strategy", "public/default")[1] == "FORWARD\n"
    assert cli("namespaces", "set-is-allow-auto-update-schema", "public/default", "--disable")[0] == 0
    assert cli("namespaces", "get-is-allow-auto-update-schema", "public/default")[1] == "disabled\n"
    assert cli("namespaces", "set-schema-validation-enforce", "public/default", "--enable")[0] == 0
    assert cli("namespaces", "get-schema-validation-enforce", "public/default")[1] == "enabled\n"
    assert cli("namespaces", "set-schema-compatibility-strategy", "public/default", "-c", "SOMETIMES")[0] == 2
