"""TLS in the Helm chart (issue 24): a Secret of the user's or a cert-manager Certificate
(with their Issuer, or a self-signed CA made for the release), mounted into every pod,
the same MAGNETAR_TLS_* names `magnetar-local run --tls` sets, https:// and
pulsar+ssl:// advertised, probes and scraping over HTTPS, the bundled PostgreSQL serving
TLS to sslmode=verify-full.  Rendered with the real helm and validated with
kubernetes-validate (cert-manager's own kinds checked by hand: no schema ships for them)."""

from __future__ import annotations

import pytest

from magnetar_runtime.local.cluster import LocalTls
from tests.unit.deploy.conftest import by_kind, env_of, pod_spec, render, validate

CERT_MANAGER = ["tls.enabled=true", "tls.certManager.enabled=true", "tls.certManager.issuerRef.name=corp-ca",
                "tls.certManager.issuerRef.kind=ClusterIssuer"]
SELF_SIGNED = ["tls.enabled=true", "tls.certManager.enabled=true", "tls.certManager.selfSigned=true"]
MUTUAL = ["tls.enabled=true", "tls.existingSecret=my-tls", "tls.requireClientCert=true"]
SERVICES = ["rel-magnetar-broker", "rel-magnetar-coordinator", "rel-magnetar-registry", "rel-magnetar-admin"]


def workloads(objects: list[dict]) -> dict[str, dict]:
    return by_kind(objects, "StatefulSet") | by_kind(objects, "Deployment")


@pytest.mark.parametrize("sets", [CERT_MANAGER, SELF_SIGNED, MUTUAL], ids=["issuer", "self-signed", "mutual"])
def test_tls_renders_valid_kubernetes(sets, tmp_path):
    objects = render(*sets)
    validate([o for o in objects if not o["apiVersion"].startswith("cert-manager.io/")], tmp_path)


def test_a_cert_manager_certificate_covers_every_service_and_pod():
    objects = render(*CERT_MANAGER)
    [cert] = [o for o in objects if o["kind"] == "Certificate"]
    spec = cert["spec"]
    assert cert["apiVersion"] == "cert-manager.io/v1" and spec["secretName"] == "rel-magnetar-tls"
    assert spec["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert {"server auth", "client auth"} <= set(spec["usages"])  # also a client certificate (mTLS)
    for name in SERVICES + ["rel-magnetar-postgresql"]:
        assert f"{name}.ns.svc" in spec["dnsNames"]
    # Each StatefulSet pod's advertised name, through the headless Service.
    assert "*.rel-magnetar-broker.ns.svc" in spec["dnsNames"]
    assert "*.rel-magnetar-coordinator.ns.svc" in spec["dnsNames"]
    assert spec["renewBefore"] == "720h" and spec["privateKey"]["rotationPolicy"] == "Always"
    assert not [o for o in objects if o["kind"] == "Issuer"]  # the user's issuer is used


def test_self_signed_makes_a_ca_and_an_issuer_from_it():
    objects = render(*SELF_SIGNED)
    issuers = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Issuer"}
    assert issuers == {"rel-magnetar-selfsigned": {"selfSigned": {}},
                       "rel-magnetar-ca": {"ca": {"secretName": "rel-magnetar-ca"}}}
    certs = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Certificate"}
    assert certs["rel-magnetar-ca"]["isCA"] is True
    assert certs["rel-magnetar-ca"]["issuerRef"]["name"] == "rel-magnetar-selfsigned"
    assert certs["rel-magnetar-tls"]["issuerRef"]["name"] == "rel-magnetar-ca"


@pytest.mark.parametrize("sets,secret", [(CERT_MANAGER, "rel-magnetar-tls"), (MUTUAL, "my-tls")])
def test_every_service_mounts_the_secret_and_gets_the_local_clusters_names(sets, secret):
    objects = render(*sets)
    names = set(LocalTls(*(["x"] * 3)).env("requireClientCert=true" in " ".join(sets)))
    for name in SERVICES:
        workload = workloads(objects)[name]
        env = env_of(workload)
        assert names <= set(env), (name, names - set(env))
        assert env["MAGNETAR_TLS_ENABLED"]["value"] == "true"
        assert env["MAGNETAR_TLS_CERT_FILE"]["value"] == "/etc/magnetar/tls/tls.crt"
        assert env["MAGNETAR_TLS_KEY_FILE"]["value"] == "/etc/magnetar/tls/tls.key"
        assert env["MAGNETAR_TLS_CA_FILE"]["value"] == "/etc/magnetar/tls/ca.crt"
        assert env["MAGNETAR_ADVERTISED_URL"]["value"].startswith("https://")
        assert "sslmode=verify-full&sslrootcert=/etc/magnetar/tls/ca.crt" in env["MAGNETAR_DATABASE_URL"]["value"]
        spec = pod_spec(workload)
        [volume] = [v for v in spec["volumes"] if v["name"] == "tls"]
        assert volume["secret"]["secretName"] == secret
        [container] = spec["containers"]
        [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
        assert mount == {"name": "tls", "mountPath": "/etc/magnetar/tls", "readOnly": True}
        assert "subPath" not in mount  # a subPath mount never sees the Secret's updates
        for init in spec.get("initContainers", []):  # magnetar-migrate reads the CA too
            assert any(m["name"] == "tls" for m in init["volumeMounts"])
    broker = env_of(workloads(objects)["rel-magnetar-broker"])
    assert broker["MAGNETAR_ADVERTISED_PULSAR_URL"]["value"].startswith("pulsar+ssl://")


def test_probes_speak_https_and_under_mutual_tls_run_in_the_pod():
    for name, workload in workloads(render(*CERT_MANAGER)).items():
        if name in SERVICES:
            [container] = pod_spec(workload)["containers"]
            assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    for name, workload in workloads(render(*MUTUAL)).items():
        if name in SERVICES:
            [container] = pod_spec(workload)["containers"]
            assert container["readinessProbe"]["exec"]["command"] == ["magnetar-probe", "/readyz"]
            assert container["livenessProbe"]["exec"]["command"] == ["magnetar-probe", "/healthz"]


def test_the_bundled_postgresql_serves_tls():
    pg = workloads(render(*CERT_MANAGER))["rel-magnetar-postgresql"]
    [container] = pod_spec(pg)["containers"]
    assert container["args"] == ["-c", "ssl=on", "-c", "ssl_cert_file=/etc/magnetar/tls/tls.crt",
                                 "-c", "ssl_key_file=/etc/magnetar/tls/tls.key"]
    [volume] = [v for v in pod_spec(pg)["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["defaultMode"] == 0o440  # PostgreSQL refuses a world-readable key


def test_the_helm_test_pod_and_scraping_use_the_ca():
    objects = render(*MUTUAL, "monitoring.podMonitor=true", "monitoring.serviceMonitor=true")
    [pod] = [o for o in objects if o["kind"] == "Pod"]
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["MAGNETAR_SERVICE_URL"]["value"].startswith("https://")
    assert env["MAGNETAR_TLS_CA_FILE"]["value"] == "/etc/magnetar/tls/ca.crt"
    for kind, key in (("PodMonitor", "podMetricsEndpoints"), ("ServiceMonitor", "endpoints")):
        [endpoint] = by_kind(objects, kind)["rel-magnetar"]["spec"][key]
        assert endpoint["scheme"] == "https"
        assert endpoint["tlsConfig"]["ca"] == {"secret": {"name": "my-tls", "key": "ca.crt"}}
        assert endpoint["tlsConfig"]["keySecret"] == {"name": "my-tls", "key": "tls.key"}


def test_spark_jobs_get_the_ca_and_under_mutual_tls_the_certificate():
    objects = render(*MUTUAL, "components.sparkJobs=true", "sparkJobs.authTokenSecret.name=t",
                     "sparkJobs.jobs.windowed-counts.enabled=true")
    jobs = [o for o in objects if o["kind"] in ("Deployment", "Job") and "spark" in o["metadata"]["name"]]
    assert jobs
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        [container] = spec["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["MAGNETAR_SERVICE_URL"].startswith("https://") and env["MAGNETAR_ADMIN_URL"].startswith("https://")
        assert env["MAGNETAR_TLS_TRUST_CERT_PATH"] == "/etc/magnetar/tls/ca.crt"
        assert env["MAGNETAR_TLS_CERT_FILE"] == "/etc/magnetar/tls/tls.crt"
        assert any(m["name"] == "tls" for m in container["volumeMounts"])
        assert any(v["name"] == "tls" and v["secret"]["secretName"] == "my-tls" for v in spec["volumes"])


def test_plaintext_by_default():
    objects = render()
    assert not [o for o in objects if o["apiVersion"].startswith("cert-manager.io/")]
    for name in SERVICES:
        env = env_of(workloads(objects)[name])
        assert "MAGNETAR_TLS_ENABLED" not in env
        assert env["MAGNETAR_ADVERTISED_URL"]["value"].startswith("http://")


@pytest.mark.parametrize("sets,message", [
    (["tls.enabled=true"], "tls.existingSecret"),
    (["tls.enabled=true", "tls.existingSecret=x", "tls.certManager.enabled=true",
      "tls.certManager.selfSigned=true"], "not both"),
    (["tls.enabled=true", "tls.certManager.enabled=true"], "issuerRef.name"),
    (["tls.databaseSslMode=sometimes"], "databaseSslMode"),
])
def test_incomplete_tls_values_fail_with_a_reason(sets, message):
    assert message in render(*sets, expect_failure=True)
