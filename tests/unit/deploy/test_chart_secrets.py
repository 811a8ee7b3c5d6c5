"""Reinstalling over kept data (issue 19, item 3), as rendered: the generated Secrets
are kept by `helm uninstall`, the PostgreSQL volume outlives it, and a Secret of the
user's (postgresql.existingSecret) is what every reader of the password uses.

Not testable without a cluster: that `lookup` hands an upgrade the existing password
(helm template has no cluster, so lookup returns nothing) and that Helm adopts the kept
Secret on reinstall.  What is tested is what those rely on: the annotation, the name,
the keys, and that no pod reads the password from anywhere else."""

from __future__ import annotations

import base64

from tests.unit.deploy.conftest import by_kind, pod_spec, render, validate

PASSWORD_READERS = "PGPASSWORD", "POSTGRES_PASSWORD"


def password_refs(objects: list[dict]) -> list[tuple[str, str, dict]]:
    """(object, container, secretKeyRef) of every container that reads the database
    password, init containers, hook Jobs and test pods included."""
    found = []
    for o in objects:
        spec = o.get("spec", {})
        pod = spec if o["kind"] == "Pod" else (
            spec.get("template", {}).get("spec") or
            spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec"))
        if not pod:
            continue
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            for e in c.get("env", []):
                if e["name"] in PASSWORD_READERS:
                    found.append((o["metadata"]["name"], c["name"], e["valueFrom"]["secretKeyRef"]))
    return found


def test_generated_secrets_are_kept_by_uninstall():
    secrets = by_kind(render(), "Secret")
    for name in ("rel-magnetar-database", "rel-magnetar-auth"):
        assert secrets[name]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", name


def test_the_volume_outlives_uninstall_and_scale_down():
    postgresql = by_kind(render(), "StatefulSet")["rel-magnetar-postgresql"]
    assert postgresql["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain", "whenScaled": "Retain"}
    deleting = by_kind(render("postgresql.persistentVolumeClaimRetentionPolicy.whenDeleted=Delete"),
                       "StatefulSet")["rel-magnetar-postgresql"]
    assert deleting["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete"


def test_every_pod_reads_the_password_from_the_one_secret_and_no_url_carries_it():
    objects = render()
    refs = password_refs(objects)
    readers = {(o, c) for o, c, _ in refs}
    # PostgreSQL itself, every service and its migrate init container, the hook Job.
    assert ("rel-magnetar-postgresql", "postgresql") in readers
    for component in ("coordinator", "broker", "registry", "admin"):
        assert (f"rel-magnetar-{component}", component) in readers
        assert (f"rel-magnetar-{component}", "migrate") in readers
    assert ("rel-magnetar-migrate-1", "migrate") in readers
    assert {(r["name"], r["key"]) for _, _, r in refs} == {("rel-magnetar-database", "password")}
    for o in objects:  # the URL the pods get names the server, not the password
        if o["kind"] in ("StatefulSet", "Deployment") and o["metadata"]["name"] != "rel-magnetar-postgresql":
            [container] = pod_spec(o)["containers"]
            url = {e["name"]: e for e in container["env"]}["MAGNETAR_DATABASE_URL"]["value"]
            assert url == "postgresql://magnetar@rel-magnetar-postgresql:5432/magnetar"


def test_an_existing_secret_is_used_everywhere_and_nothing_is_generated(tmp_path):
    objects = render("postgresql.existingSecret=mine", "postgresql.existingSecretKey=pw")
    validate(objects, tmp_path)
    assert "rel-magnetar-database" not in by_kind(objects, "Secret")
    refs = password_refs(objects)
    assert len(refs) == 10  # postgresql, 4 services + 4 init containers, the hook Job
    assert {(r["name"], r["key"]) for _, _, r in refs} == {("mine", "pw")}


def test_an_explicit_password_is_rendered_as_given_every_time():
    """What a GitOps render (no lookup) can rely on besides existingSecret: the same
    input gives the same Secret, render after render."""
    def password() -> str:
        secret = by_kind(render("postgresql.password=from-values", fresh=True), "Secret")[
            "rel-magnetar-database"]
        return base64.b64decode(secret["data"]["password"]).decode()
    assert password() == password() == "from-values"


def test_without_lookup_a_render_invents_a_new_password_each_time():
    """Why GitOps must give existingSecret or a password (docs/kubernetes.md): with no
    cluster to look up, every render draws a new one."""
    def password() -> bytes:
        return by_kind(render(fresh=True), "Secret")["rel-magnetar-database"]["data"]["password"]
    assert password() != password()
