"""Tenants and namespaces over HTTP against a real database: each answer, each refusal
with its reason, and no change left behind by a refused request."""

T = "/admin/v2/tenants"
NS = "/admin/v2/namespaces"


def test_tenants_lifecycle(admin):
    assert admin.ok("GET", T) == ["public"]
    assert admin.call("PUT", f"{T}/acme", {"adminRoles": ["ops", "dev"], "allowedClusters": ["standalone"]}) \
        == (204, None)
    assert admin.call("PUT", f"{T}/zeta") == (204, None)  # the body is optional
    assert admin.ok("GET", T) == ["acme", "public", "zeta"]
    assert admin.ok("GET", f"{T}/acme") == {"adminRoles": ["dev", "ops"], "allowedClusters": ["standalone"]}
    assert admin.sql("SELECT admin_roles FROM tenants WHERE tenant = 'acme'") == [{"admin_roles": ["dev", "ops"]}]
    admin.ok("POST", f"{T}/acme", {"adminRoles": ["root"]})
    assert admin.ok("GET", f"{T}/acme")["adminRoles"] == ["root"]
    assert admin.call("DELETE", f"{T}/zeta") == (204, None)
    assert admin.ok("GET", T) == ["acme", "public"]
    assert admin.ok("GET", "/admin/v2/clusters") == ["standalone"]


def test_tenant_refusals_change_nothing(admin):
    admin.ok("PUT", f"{T}/acme", {"adminRoles": ["ops"]})
    reason = admin.refused("PUT", f"{T}/acme", {"adminRoles": ["other"]}, status=409, code="Conflict")
    assert "acme" in reason and "already exists" in reason
    assert "nope" in admin.refused("GET", f"{T}/nope", status=404, code="TenantNotFound")
    assert "nope" in admin.refused("DELETE", f"{T}/nope", status=404, code="TenantNotFound")
    assert "nope" in admin.refused("POST", f"{T}/nope", {"adminRoles": []}, status=404)
    assert "TenantInfo" in admin.refused("POST", f"{T}/acme", status=400)  # an update needs a body
    assert "bad$name" in admin.refused("PUT", f"{T}/bad$name", status=400, code="InvalidTopicName")
    assert "'..'" in admin.refused("PUT", f"{T}/a..b", status=400)
    assert "other-dc" in admin.refused("PUT", f"{T}/new", {"allowedClusters": ["other-dc"]}, status=400)
    assert "adminRoles" in admin.refused("PUT", f"{T}/new", {"adminRoles": "ops"}, status=400)
    assert "TenantInfo" in admin.refused("PUT", f"{T}/new", [1, 2], status=400)
    assert "JSON" in admin.refused("PUT", f"{T}/new", raw=b"{not json", status=400, code="BadRequest",
                                   headers={"content-type": "application/json"})


def test_tenant_with_namespaces_cannot_be_deleted(admin):
    admin.ok("PUT", f"{T}/acme")
    admin.ok("PUT", f"{NS}/acme/one")
    reason = admin.refused("DELETE", f"{T}/acme", status=409, code="Conflict")
    assert "acme" in reason and "namespace" in reason
    admin.ok("DELETE", f"{NS}/acme/one")
    admin.ok("DELETE", f"{T}/acme")
    assert admin.sql("SELECT tenant FROM tenants ORDER BY 1") == [{"tenant": "public"}]


def test_namespaces_lifecycle(admin):
    admin.ok("PUT", f"{T}/acme")
    assert admin.ok("GET", f"{NS}/acme") == []
    assert admin.call("PUT", f"{NS}/acme/orders") == (204, None)
    admin.ok("PUT", f"{NS}/acme/audit")
    assert admin.ok("GET", f"{NS}/acme") == ["acme/audit", "acme/orders"]
    assert admin.ok("GET", f"{NS}/public") == ["public/default"]
    assert admin.ok("GET", f"{NS}/acme/orders/topics") == []
    assert admin.call("DELETE", f"{NS}/acme/audit") == (204, None)
    assert admin.ok("GET", f"{NS}/acme") == ["acme/orders"]


def test_namespace_refusals_change_nothing(admin):
    admin.ok("PUT", f"{T}/acme")
    admin.ok("PUT", f"{NS}/acme/orders")
    assert "already exists" in admin.refused("PUT", f"{NS}/acme/orders", status=409)
    assert "'nope'" in admin.refused("PUT", f"{NS}/nope/orders", status=404, code="TenantNotFound")
    assert "'nope'" in admin.refused("GET", f"{NS}/nope", status=404, code="TenantNotFound")
    assert "acme/missing" in admin.refused("DELETE", f"{NS}/acme/missing", status=404,
                                           code="NamespaceNotFound")
    assert "acme/missing" in admin.refused("GET", f"{NS}/acme/missing/topics", status=404)
    assert "namespace name" in admin.refused("PUT", f"{NS}/acme/bad%20name", status=400)
    assert "force" in admin.refused("DELETE", f"{NS}/acme/orders?force=maybe", status=400, code="BadRequest")


def test_deduplication_policy(admin):
    path = f"{NS}/public/default/deduplication"
    assert admin.call("GET", path) == (200, None)  # null: the broker default
    assert admin.call("POST", path, False) == (204, None)
    assert admin.ok("GET", path) is False
    assert admin.sql("SELECT deduplication_enabled FROM namespaces") == [{"deduplication_enabled": False}]
    admin.ok("POST", path, raw=b"true")  # `curl -d true` sends a form content type: still JSON
    assert admin.ok("GET", path) is True
    assert admin.call("DELETE", path) == (204, None)
    assert admin.call("GET", path) == (200, None)
    assert admin.sql("SELECT deduplication_enabled FROM namespaces") == [{"deduplication_enabled": None}]


def test_deduplication_refusals_change_nothing(admin):
    path = f"{NS}/public/default/deduplication"
    admin.ok("POST", path, True)
    assert "true or false" in admin.refused("POST", path, "yes", status=400)
    assert "true or false" in admin.refused("POST", path, 1, status=400)
    assert "empty body" in admin.refused("POST", path, raw=b"", status=400)
    assert "public/nope" in admin.refused("POST", f"{NS}/public/nope/deduplication", False, status=404,
                                          code="NamespaceNotFound")
    assert "public/nope" in admin.refused("GET", f"{NS}/public/nope/deduplication", status=404)
    assert "public/nope" in admin.refused("DELETE", f"{NS}/public/nope/deduplication", status=404)


def test_namespace_with_topics_needs_force_which_deletes_everything(admin):
    admin.ok("PUT", f"{T}/acme")
    admin.ok("PUT", f"{NS}/acme/orders")
    admin.ok("PUT", "/admin/v2/persistent/acme/orders/events/partitions", 2)
    admin.ok("PUT", "/admin/v2/persistent/acme/orders/solo")
    topic_id = admin.sql("SELECT topic_id FROM topics WHERE topic = 'persistent://acme/orders/solo'")[0]["topic_id"]
    admin.sql("INSERT INTO entries VALUES ($1, 0, 'p', 0, 0, 1, 0, 'x')", topic_id)
    admin.sql("INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry) VALUES ($1, 's', -1)",
              topic_id)
    admin.sql("INSERT INTO producer_sequences (topic_id, producer_name, last_sequence_id) VALUES ($1, 'p', 0)",
              topic_id)
    reason = admin.refused("DELETE", f"{NS}/acme/orders", status=409)
    assert "acme/orders" in reason and "force" in reason
    assert admin.call("DELETE", f"{NS}/acme/orders?force=true") == (204, None)
    assert admin.ok("GET", f"{NS}/acme") == []
    for table in ("topics", "partitioned_topics", "topic_owners", "entries", "subscriptions",
                  "producer_sequences"):
        assert admin.sql(f"SELECT count(*) AS n FROM {table}") == [{"n": 0}], table
    admin.ok("DELETE", f"{T}/acme")


def test_unknown_paths_and_methods_answer_json(admin):
    status, answer = admin.call("GET", "/admin/v2/nothing-here")
    assert status == 404 and "/admin/v2/nothing-here" in answer["reason"]
    status, answer = admin.call("PATCH", f"{T}/public")
    assert status == 405 and answer["reason"]
