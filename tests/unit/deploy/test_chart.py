"""The Helm chart: lint, render for several value sets, validate every object with
kubernetes-validate --strict, and check the properties the services rely on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.deploy.conftest import CHART, by_kind, env_of, helm_binary, render

VALUE_SETS = {
    "default": [],
    "external database": ["components.postgresql=false",
                          "database.external.url=postgresql://m:pw@db.example:5432/magnetar"],
    "auth on with RS256": ["auth.enabled=true", "auth.jwt.publicKey=-----BEGIN PUBLIC KEY-----",
                           "auth.serviceToken=tok"],
    "3 coordinators and 3 brokers": ["coordinator.replicaCount=3", "broker.replicaCount=3",
                                     "admin.ingress.enabled=true", "monitoring.grafanaDashboard.enabled=true"],
    "brokers host the coordinators": ["components.coordinator=false", "broker.hostCoordinator=true"],
    "Spark jobs on": ["components.sparkJobs=true", "sparkJobs.authTokenSecret.name=spark-token",
                      "sparkJobs.jobs.windowed-counts.enabled=true",
                      "sparkJobs.jobs.archive-orders.enabled=true"],
}


def test_helm_lint_passes():
    result = subprocess.run([helm_binary(), "lint", "--strict", str(CHART)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_rendered_object_is_valid_kubernetes(name, tmp_path):
    objects = render(*VALUE_SETS[name])
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    validate = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run([str(validate), "--strict", "--quiet", str(path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(objects) >= 12


def test_the_coordinator_id_is_the_pod_index_and_brokers_are_named_by_their_pod():
    objects = render("coordinator.replicaCount=3", "broker.replicaCount=3")
    sets = by_kind(objects, "StatefulSet")
    coordinator, broker = sets["rel-magnetar-coordinator"], sets["rel-magnetar-broker"]
    assert coordinator["spec"]["replicas"] == 3 and broker["spec"]["replicas"] == 3
    env = env_of(coordinator)
    assert env["MAGNETAR_COORDINATOR_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["MAGNETAR_ADVERTISED_URL"]["value"] == \
        "http://$(POD_NAME).rel-magnetar-coordinator.ns.svc:8080"
    assert env_of(broker)["MAGNETAR_BROKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    services = by_kind(objects, "Service")
    assert services["rel-magnetar-broker"]["spec"]["clusterIP"] == "None"  # headless
    assert services["rel-magnetar-coordinator"]["spec"]["clusterIP"] == "None"


def test_probes_security_and_graceful_shutdown_on_every_service():
    objects = render()
    workloads = [o for o in objects if o["kind"] in ("StatefulSet", "Deployment")
                 and o["metadata"]["name"] != "rel-magnetar-postgresql"]
    assert {o["metadata"]["name"] for o in workloads} == {
        f"rel-magnetar-{c}" for c in ("coordinator", "broker", "registry", "admin")}
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        [container] = pod["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["terminationGracePeriodSeconds"] >= 15
        # Only the admin (scale endpoint) talks to the Kubernetes API.
        assert pod["automountServiceAccountToken"] is False  # no pod calls the Kubernetes API
        assert pod["initContainers"][0]["command"] == ["magnetar-migrate"]
        assert container["resources"]["requests"]


def test_termination_grace_covers_every_shutdown_step():
    """Kubernetes SIGKILLs a pod terminationGracePeriodSeconds after deletion starts,
    preStop included.  After SIGTERM a service may take: the broker's lease release and
    uvicorn's wait for open requests (serve.GRACE_S each at most), then the coordinator's
    wait for the commits it drives (DRAIN_S).  Brokers and coordinators have no preStop
    delay (clients reach them by pod address; a delay would only postpone the release)."""
    from magnetar_coordinator.service import DRAIN_S
    from magnetar_runtime.serve import GRACE_S

    after_sigterm = {"coordinator": GRACE_S + DRAIN_S, "broker": 2 * GRACE_S,
                     "registry": GRACE_S, "admin": GRACE_S}
    workloads = {**by_kind(render(), "StatefulSet"), **by_kind(render(), "Deployment")}
    for component, needed in after_sigterm.items():
        pod = workloads[f"rel-magnetar-{component}"]["spec"]["template"]["spec"]
        [container] = pod["containers"]
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        sleep = int(pre_stop[1]) if pre_stop else 0
        assert pod["terminationGracePeriodSeconds"] >= sleep + needed, component
        assert (sleep == 0) == (component in ("coordinator", "broker")), component
    longer = by_kind(render("admin.preStopSleepSeconds=15"), "Deployment")["rel-magnetar-admin"]
    assert longer["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"][
        "command"] == ["sleep", "15"]
    assert "preStopSleepSeconds" in render("broker.preStopSleepSeconds=-1", expect_failure=True)


def test_migration_job_is_a_hook_before_upgrades():
    bundled = by_kind(render(), "Job")
    [job] = bundled.values()
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["magnetar-migrate"]
    [external] = by_kind(render(*VALUE_SETS["external database"]), "Job").values()
    assert external["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"


def test_secrets_auth_and_no_kubernetes_api_rights():
    objects = render()
    secrets = by_kind(objects, "Secret")
    assert set(secrets["rel-magnetar-auth"]["data"]) == {"jwt-secret"}  # generated
    assert set(secrets["rel-magnetar-database"]["data"]) == {"url", "password"}
    env = env_of(by_kind(objects, "StatefulSet")["rel-magnetar-broker"])
    assert env["MAGNETAR_AUTH_ENABLED"]["value"] == "true"  # on by default in the chart
    assert env["MAGNETAR_AUTH_JWT_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "rel-magnetar-auth"
    # No Magnetar code calls the Kubernetes API (the coordinator count is Helm's alone), so
    # no pod gets API rights or a mounted service-account token.
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding", "ClusterRole",
                                                    "ClusterRoleBinding")]
    deployments = by_kind(objects, "Deployment")
    pods = [o["spec"]["template"]["spec"] for o in objects
            if o["kind"] in ("Deployment", "StatefulSet", "Job")]
    assert pods and all(p["automountServiceAccountToken"] is False for p in pods)
    admin_env = env_of(deployments["rel-magnetar-admin"])
    assert admin_env["MAGNETAR_COORDINATOR_STATEFULSET"]["value"] == "rel-magnetar-coordinator"
    assert admin_env["MAGNETAR_KUBERNETES_NAMESPACE"]["value"] == "ns"
    rs256 = render(*VALUE_SETS["auth on with RS256"])
    assert set(by_kind(rs256, "Secret")["rel-magnetar-auth"]["data"]) == {"jwt-public-key",
                                                                          "service-token"}
    off = render("auth.enabled=false")
    assert "rel-magnetar-auth" not in by_kind(off, "Secret")


def test_brokers_can_host_the_coordinators_instead_of_a_coordinator_statefulset():
    objects = render(*VALUE_SETS["brokers host the coordinators"])
    sets = by_kind(objects, "StatefulSet")
    assert "rel-magnetar-coordinator" not in sets
    env = env_of(sets["rel-magnetar-broker"])
    assert env["MAGNETAR_HOST_COORDINATOR"]["value"] == "true"
    assert env["MAGNETAR_COORDINATOR_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['apps.kubernetes.io/pod-index']"
    assert "MAGNETAR_HOST_COORDINATOR" not in env_of(by_kind(render(), "StatefulSet")["rel-magnetar-broker"])
    error = render("broker.hostCoordinator=true", expect_failure=True)
    assert "components.coordinator=false" in error
    admin = by_kind(objects, "Deployment")["rel-magnetar-admin"]
    assert env_of(admin)["MAGNETAR_COORDINATORS_IN_BROKERS"]["value"] == "true"  # no scale endpoint


def test_external_database_and_component_toggles():
    objects = render(*VALUE_SETS["external database"])
    assert "rel-magnetar-postgresql" not in by_kind(objects, "StatefulSet")
    assert set(by_kind(objects, "Secret")["rel-magnetar-database"]["data"]) == {"url"}
    error = render("components.postgresql=false", expect_failure=True)
    assert "database.external.url" in error
    none = render("components.registry=false", "components.admin=false")
    assert not by_kind(none, "Deployment")


def test_monitoring_toggles_and_bad_values():
    objects = render("monitoring.podMonitor=true", "monitoring.serviceMonitor=true")
    kinds = {o["kind"] for o in objects}
    assert {"PodMonitor", "ServiceMonitor"} <= kinds
    assert "replicaCount" in render("broker.replicaCount=0", expect_failure=True)
    assert "brokr" in render("brokr.replicaCount=1", expect_failure=True)
    error = render("auth.jwt.publicKey=x", expect_failure=True)
    assert "auth.serviceToken" in error


def test_brokers_expose_the_pulsar_port_and_advertise_their_pulsar_url():
    objects = render()
    broker = by_kind(objects, "StatefulSet")["rel-magnetar-broker"]
    env = env_of(broker)
    assert env["MAGNETAR_PULSAR_PORT"]["value"] == "6650"
    assert env["MAGNETAR_ADVERTISED_PULSAR_URL"]["value"] == "pulsar://$(POD_NAME).rel-magnetar-broker.ns.svc:6650"
    [container] = broker["spec"]["template"]["spec"]["containers"]
    assert {"name": "pulsar", "containerPort": 6650, "protocol": "TCP"} in container["ports"]
    service = by_kind(objects, "Service")["rel-magnetar-broker"]
    assert {"name": "pulsar", "port": 6650, "targetPort": "pulsar"} in service["spec"]["ports"]
    off = by_kind(render("broker.pulsar.enabled=false"), "StatefulSet")["rel-magnetar-broker"]
    assert "MAGNETAR_PULSAR_PORT" not in env_of(off)


def test_brokers_get_the_trimming_floor_with_the_settings_default():
    from magnetar_broker.settings import BrokerSettings

    broker = by_kind(render(), "StatefulSet")["rel-magnetar-broker"]
    default = BrokerSettings.model_fields["trim_min_age_s"].default
    assert env_of(broker)["MAGNETAR_TRIM_MIN_AGE_S"]["value"] == str(default) == "600"
    shorter = by_kind(render("broker.trimMinAgeSeconds=0"), "StatefulSet")["rel-magnetar-broker"]
    assert env_of(shorter)["MAGNETAR_TRIM_MIN_AGE_S"]["value"] == "0"
    assert "trimMinAgeSeconds" in render("broker.trimMinAgeSeconds=-1", expect_failure=True)
