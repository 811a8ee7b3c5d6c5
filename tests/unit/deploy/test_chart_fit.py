"""Fitting small and large clusters (issue 19, item 7): the shipped values files, the
per-component placement and extras knobs, probe timings, the PostgreSQL startup probe,
the coordinator disruption budget and the supported Kubernetes versions.  Every rendered
object is validated with kubernetes-validate, at the newest version and at 1.28, the
oldest the chart accepts."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.unit.deploy.conftest import CHART, by_kind, env_of, helm_binary, pod_spec, render, validate

SMALL = CHART / "values-small.yaml"
PRODUCTION = CHART / "values-production.yaml"
SERVICES = ("coordinator", "broker", "registry", "admin")


def millicores(quantity: str | int) -> int:
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def cpu_requested(objects: list[dict]) -> int:
    """The CPU the scheduler reserves for every pod of the release at once (an init
    container counts only when it asks for more than the pod's containers)."""
    total = 0
    for o in objects:
        if o["kind"] not in ("StatefulSet", "Deployment"):
            continue
        spec = pod_spec(o)
        containers = sum(millicores(c["resources"]["requests"]["cpu"]) for c in spec["containers"])
        init = max([millicores(c["resources"]["requests"]["cpu"]) for c in spec.get("initContainers", [])]
                   or [0])
        total += o["spec"]["replicas"] * max(containers, init)
    return total


@pytest.mark.parametrize("values", [SMALL, PRODUCTION], ids=["small", "production"])
@pytest.mark.parametrize("kubernetes", [None, "1.28.0"], ids=["newest", "1.28"])
def test_shipped_values_files_render_valid_objects(values, kubernetes, tmp_path):
    validate(render(values=(values,)), tmp_path, kubernetes)


def test_small_values_fit_one_two_cpu_node_with_three_brokers():
    objects = render(values=(SMALL,))
    sets = by_kind(objects, "StatefulSet")
    assert sets["rel-magnetar-broker"]["spec"]["replicas"] == 3
    assert "rel-magnetar-coordinator" not in sets  # the brokers host the coordinators
    assert env_of(sets["rel-magnetar-broker"])["MAGNETAR_HOST_COORDINATOR"]["value"] == "true"
    # A single-node kind cluster requests ~950m of 2 CPUs for its own pods.
    assert cpu_requested(objects) <= 1000
    assert cpu_requested(render()) > 1500  # the defaults would not fit (the finding)


def test_production_values_are_highly_available():
    objects = render(values=(PRODUCTION,))
    workloads = {**by_kind(objects, "StatefulSet"), **by_kind(objects, "Deployment")}
    pdbs = by_kind(objects, "PodDisruptionBudget")
    for component in SERVICES:
        workload = workloads[f"rel-magnetar-{component}"]
        assert workload["spec"]["replicas"] >= (3 if component in ("coordinator", "broker") else 2)
        anti = pod_spec(workload)["affinity"]["podAntiAffinity"]
        assert anti, component
        assert pdbs[f"rel-magnetar-{component}"]["spec"]["maxUnavailable"] == 1
    for component in ("coordinator", "broker"):
        spec = pod_spec(workloads[f"rel-magnetar-{component}"])
        [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        [spread] = spec["topologySpreadConstraints"]
        assert spread["topologyKey"] == "topology.kubernetes.io/zone"


EVERY_KNOB = {
    "nodeSelector": {"pool": "magnetar"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "magnetar", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": {"matchLabels": {"a": "b"}}}],
    "priorityClassName": "magnetar-critical",
    "podAnnotations": {"example.com/team": "streaming"},
}
EXTRAS = {
    "extraEnv": [{"name": "PGSSLROOTCERT", "value": "/etc/magnetar-ca/ca.crt"}],
    "extraVolumes": [{"name": "ca", "secret": {"secretName": "db-ca"}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/magnetar-ca", "readOnly": True}],
    "service": {"annotations": {"example.com/lb": "internal"}},
}


@pytest.fixture
def every_knob(tmp_path):
    values = {c: {**EVERY_KNOB, **EXTRAS} for c in SERVICES}
    values["postgresql"] = dict(EVERY_KNOB)
    for c in SERVICES:
        values[c]["probes"] = {p: {"timeoutSeconds": 7, "periodSeconds": 11, "failureThreshold": 4}
                               for p in ("startup", "readiness", "liveness")}
    path = tmp_path / "every-knob.yaml"
    path.write_text(yaml.safe_dump(values))
    return render(values=(path,))


def test_every_knob_renders_valid_objects(every_knob, tmp_path):
    validate(every_knob, tmp_path)
    validate(every_knob, tmp_path, "1.28.0")


def test_every_component_takes_the_placement_and_extras_knobs(every_knob):
    workloads = {**by_kind(every_knob, "StatefulSet"), **by_kind(every_knob, "Deployment")}
    services = by_kind(every_knob, "Service")
    for component in (*SERVICES, "postgresql"):
        workload = workloads[f"rel-magnetar-{component}"]
        spec = pod_spec(workload)
        for key in ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints",
                    "priorityClassName"):
            assert spec[key] == EVERY_KNOB[key], (component, key)
        assert workload["spec"]["template"]["metadata"]["annotations"]["example.com/team"] == \
            "streaming", component
        if component == "postgresql":
            continue
        assert workload["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        [container] = spec["containers"]
        assert container["env"][-1] == EXTRAS["extraEnv"][0], component  # after the chart's
        assert EXTRAS["extraVolumeMounts"][0] in container["volumeMounts"], component
        [migrate] = spec["initContainers"]  # a CA for the database is needed there too
        assert EXTRAS["extraVolumeMounts"][0] in migrate["volumeMounts"], component
        assert EXTRAS["extraEnv"][0] in migrate["env"], component
        assert EXTRAS["extraVolumes"][0] in spec["volumes"], component
        assert services[f"rel-magnetar-{component}"]["metadata"]["annotations"] == \
            {"example.com/lb": "internal"}, component
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert {k: container[probe][k] for k in ("timeoutSeconds", "periodSeconds", "failureThreshold")} \
                == {"timeoutSeconds": 7, "periodSeconds": 11, "failureThreshold": 4}, (component, probe)


def test_defaults_add_nothing_and_probes_wait_five_seconds():
    workloads = {**by_kind(render(), "StatefulSet"), **by_kind(render(), "Deployment")}
    for component in SERVICES:
        spec = pod_spec(workloads[f"rel-magnetar-{component}"])
        assert not {"nodeSelector", "affinity", "tolerations", "topologySpreadConstraints",
                    "priorityClassName"} & set(spec), component
        [container] = spec["containers"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["timeoutSeconds"] == 5, (component, probe)  # not Kubernetes' 1 s


def test_postgresql_has_a_startup_probe_over_tcp_and_configurable_probes():
    [container] = pod_spec(by_kind(render(), "StatefulSet")["rel-magnetar-postgresql"])["containers"]
    startup = container["startupProbe"]
    assert startup["exec"]["command"][:3] == ["pg_isready", "-h", "127.0.0.1"]
    # 5 s x 60: a first start (initdb on an empty volume) has five minutes.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert container["readinessProbe"]["timeoutSeconds"] == 5
    [changed] = pod_spec(by_kind(render("postgresql.probes.liveness.timeoutSeconds=9"), "StatefulSet")[
        "rel-magnetar-postgresql"])["containers"]
    assert changed["livenessProbe"]["timeoutSeconds"] == 9


def test_kubernetes_older_than_1_28_is_refused():
    error = render(kube_version="1.27.9", expect_failure=True)
    assert ">=1.28.0-0" in error
    assert render(kube_version="1.28.0")


def test_one_coordinator_cannot_be_evicted_to_zero():
    one = by_kind(render(), "PodDisruptionBudget")["rel-magnetar-coordinator"]["spec"]
    assert one.get("minAvailable") == 1 and "maxUnavailable" not in one
    three = by_kind(render("coordinator.replicaCount=3"), "PodDisruptionBudget")[
        "rel-magnetar-coordinator"]["spec"]
    assert three.get("maxUnavailable") == 1 and "minAvailable" not in three
    # Brokers that host the coordinators are the coordinators: the same rule.
    hosted = render("components.coordinator=false", "broker.hostCoordinator=true", "broker.replicaCount=1")
    assert by_kind(hosted, "PodDisruptionBudget")["rel-magnetar-broker"]["spec"].get("minAvailable") == 1
    plain = by_kind(render("broker.replicaCount=1"), "PodDisruptionBudget")["rel-magnetar-broker"]["spec"]
    assert plain.get("maxUnavailable") == 1  # a lone plain broker hands its partitions over


@pytest.mark.parametrize("bad", [
    "broker.probes.readiness.timeoutSeconds=0",
    "coordinator.extraEnv[0].value=x",             # an entry without a name
    "postgresql.persistentVolumeClaimRetentionPolicy.whenDeleted=Keep",
    "migration.waitSeconds=-1",
    "registry.tolerations=notalist",
])
def test_the_schema_rejects_bad_knob_values(bad):
    assert "values don't meet the specifications" in render(bad, expect_failure=True)


def test_every_migrate_run_waits_for_the_database_for_the_configured_time():
    """Issue 19, item 6: init containers and the hook Job wait (a log line per attempt)
    instead of crash-looping while PostgreSQL starts."""
    objects = render("migration.waitSeconds=420")
    runs = [c for o in objects if o["kind"] in ("StatefulSet", "Deployment", "Job")
            for c in [*pod_spec(o).get("initContainers", []), *pod_spec(o)["containers"]]
            if c.get("command") == ["magnetar-migrate"]]
    assert len(runs) == 5  # 4 services' init containers and the hook Job
    for container in runs:
        assert {e["name"]: e.get("value") for e in container["env"]}["MAGNETAR_DATABASE_WAIT_S"] == "420"


@pytest.mark.parametrize("values", [SMALL, PRODUCTION], ids=["small", "production"])
def test_shipped_values_files_pass_helm_lint(values):
    result = subprocess.run([helm_binary(), "lint", "--strict", str(CHART), "--values", str(values)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
