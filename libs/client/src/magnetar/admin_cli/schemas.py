"""``schemas ...``: a topic's schema registry, after ``pulsar-admin schemas`` (get, upload,
delete, compatibility), and the namespace schema policies' commands that
``namespaces`` adds (``add_schema_policy_commands``)."""

from __future__ import annotations

import json

from magnetar.admin_cli._http import UsageError, q
from magnetar.admin_cli._names import topic
from magnetar.admin_cli._output import key_values, table

STRATEGIES = ("ALWAYS_COMPATIBLE", "ALWAYS_INCOMPATIBLE", "BACKWARD", "FORWARD", "FULL",
              "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")


def schema_path(value: str) -> str:
    t = topic(value)
    return f"/admin/v2/schemas/{q(t.tenant)}/{q(t.namespace)}/{q(t.base.local_name)}"


def payload(filename: str) -> dict:
    """A schema file: Pulsar's PostSchemaPayload ``{"type", "schema", "properties"}`` (what
    ``pulsar-admin schemas upload -f`` reads); the ``schema`` may be given as a JSON object
    instead of its text."""
    try:
        with open(filename, encoding="utf-8") as f:
            body = json.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read {filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{filename} is not JSON: {exc}") from None
    if not isinstance(body, dict) or "type" not in body:
        raise UsageError(f'{filename} must hold {{"type": "AVRO", "schema": "<definition>", "properties": {{}}}}')
    if isinstance(body.get("schema"), (dict, list)):
        body = body | {"schema": json.dumps(body["schema"])}
    return body


def render_schema(v: dict) -> None:
    key_values({k: v[k] for k in ("version", "type", "timestamp", "properties") if k in v})
    print()
    try:
        print(json.dumps(json.loads(v.get("data") or "null"), indent=2))
    except ValueError:
        print(v.get("data", ""))


def group_schemas(add) -> None:
    def get(api, out, a) -> None:
        path = schema_path(a.topic)
        if a.all_versions:
            versions = api.request("GET", path + "/schemas")["getSchemaResponses"]
            out.emit(versions, lambda vs: table(["VERSION", "TYPE", "TIMESTAMP", "DEFINITION"],
                                                [[v["version"], v["type"], v["timestamp"], v["data"]] for v in vs]))
            return
        suffix = "/schema" if a.version is None else f"/schema/{a.version}"
        out.emit(api.request("GET", path + suffix), render_schema)

    def upload(api, out, a) -> None:
        answer = api.request("POST", schema_path(a.topic) + "/schema", payload(a.filename))
        out.done(f"Schema of {a.topic} at version {answer['version']}", topic=a.topic, version=answer["version"])

    def delete(api, out, a) -> None:
        answer = api.request("DELETE", schema_path(a.topic) + "/schema", query={"force": "true"} if a.force else None)
        out.done(f"Deleted the schema of {a.topic}" + (" and its history" if a.force else
                                                       f" (deletion at version {answer['version']})"),
                 topic=a.topic, version=answer["version"])

    def compatibility(api, out, a) -> None:
        answer = api.request("POST", schema_path(a.topic) + "/compatibility", payload(a.filename))
        out.emit(answer, lambda v: print(
            f"compatible under {v['schemaCompatibilityStrategy']}" if v["isCompatibility"] else
            f"INCOMPATIBLE under {v['schemaCompatibilityStrategy']}: {v.get('reason')}"))

    p = add("get", get, "show the topic's schema (latest, one --version, or --all-versions)", ("topic",))
    p.add_argument("--version", type=int, help="this version instead of the latest")
    p.add_argument("--all-versions", "--all-version", "-a", dest="all_versions", action="store_true",
                   help="every version since the last deletion")
    p = add("upload", upload, "register a schema (a PostSchemaPayload JSON file)", ("topic",))
    p.add_argument("--filename", "-f", required=True, help='{"type": "AVRO", "schema": "...", "properties": {}}')
    p = add("delete", delete, "delete the topic's schema (a deletion version; --force: its history too)",
            ("topic",))
    p.add_argument("--force", action="store_true", help="remove every version (versions restart at 0)")
    p = add("compatibility", compatibility, "would this schema be accepted under the topic's strategy",
            ("topic",))
    p.add_argument("--filename", "-f", required=True, help='{"type": "AVRO", "schema": "...", "properties": {}}')


def add_schema_policy_commands(add, path) -> None:
    """The namespace's schema policies (pulsar-admin namespaces' names)."""
    def set_strategy(api, out, a) -> None:
        api.request("PUT", path(a) + "/schemaCompatibilityStrategy", a.compatibility)
        out.done(f"Schema compatibility strategy of {a.namespace}: {a.compatibility}", namespace=a.namespace,
                 strategy=a.compatibility)

    def get_strategy(api, out, a) -> None:
        out.emit(api.request("GET", path(a) + "/schemaCompatibilityStrategy"),
                 lambda v: print(f"{v} (the broker's default)" if v == "UNDEFINED" else v))

    def switch(p) -> None:
        group = p.add_mutually_exclusive_group(required=True)
        group.add_argument("--enable", "-e", dest="enable", action="store_true", default=None)
        group.add_argument("--disable", "-d", dest="enable", action="store_false")

    def boolean_policy(command: str, route: str, what: str) -> None:
        def set_(api, out, a) -> None:
            api.request("POST", path(a) + "/" + route, a.enable)
            out.done(f"{what} {'enabled' if a.enable else 'disabled'} on {a.namespace}", namespace=a.namespace,
                     **{route: a.enable})

        def get_(api, out, a) -> None:
            out.emit(api.request("GET", path(a) + "/" + route),
                     lambda v: print("broker default (not set)" if v is None else ("enabled" if v else "disabled")))

        switch(add(f"set-{command}", set_, f"turn {what} on or off", ("namespace",)))
        add(f"get-{command}", get_, f"show whether {what} is on", ("namespace",))

    p = add("set-schema-compatibility-strategy", set_strategy, "set the namespace's schema compatibility strategy",
            ("namespace",))
    p.add_argument("--compatibility", "-c", required=True, type=str.upper, choices=STRATEGIES)
    add("get-schema-compatibility-strategy", get_strategy, "show the namespace's schema compatibility strategy",
        ("namespace",))
    boolean_policy("is-allow-auto-update-schema", "isAllowAutoUpdateSchema",
                   "producers registering new schema versions")
    boolean_policy("schema-validation-enforce", "schemaValidationEnforced", "schema validation")
