"""docker-compose.yml, skaffold.yaml and the Dockerfile name things that exist, and the
chart gives each service the same MAGNETAR_* variables `magnetar-local` does."""

from __future__ import annotations

import tomllib

import yaml

from magnetar_runtime.local.cluster import KINDS, LocalCluster
from tests.unit.deploy.conftest import CHART, ROOT, by_kind, render

SERVICES = {"broker": "magnetar_broker.settings:BrokerSettings",
            "coordinator": "magnetar_coordinator.settings:CoordinatorSettings",
            "registry": "magnetar_registry.settings:RegistrySettings",
            "admin": "magnetar_admin.settings:AdminSettings"}


def console_scripts() -> set[str]:
    scripts = set()
    for pyproject in [*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("services/*/pyproject.toml")]:
        scripts |= set(tomllib.loads(pyproject.read_text())["project"].get("scripts", {}))
    return scripts


def setting_names(kind: str) -> set[str]:
    module, cls = SERVICES[kind].split(":")
    settings = getattr(__import__(module, fromlist=[cls]), cls)
    return {f"MAGNETAR_{name.upper()}" for name in settings.model_fields}


def test_compose_structure_and_commands():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "version" not in compose
    services = compose["services"]
    assert {"postgres", "migrate", "coordinator-0", "coordinator-1", "broker-0", "broker-1",
            "registry", "admin"} <= set(services)
    assert "healthcheck" in services["postgres"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    scripts = console_scripts()
    for name, svc in services.items():
        if name == "postgres":
            continue
        assert svc["command"][0] in scripts, f"{name}: {svc['command'][0]} is no console script"
        if name != "migrate":
            assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    ids = {services[f"coordinator-{i}"]["environment"]["MAGNETAR_COORDINATOR_ID"] for i in (0, 1)}
    assert ids == {"0", "1"}
    for name, kind in [("broker-0", "broker"), ("coordinator-1", "coordinator"),
                       ("registry", "registry"), ("admin", "admin")]:
        assert set(services[name]["environment"]) <= setting_names(kind), name


def test_dockerfile_and_skaffold_point_at_what_exists():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER 10001" in dockerfile and dockerfile.count("FROM ") == 2  # multi-stage, non-root
    for script in ("magnetar-broker", "magnetar-coordinator", "magnetar-registry",
                   "magnetar-admin-service", "magnetar-migrate"):
        assert script in console_scripts()
    for package in ("libs/protocol", "libs/storage", "libs/runtime", "libs/client",
                    "services/broker", "services/coordinator", "services/registry", "services/admin"):
        assert f"./{package}" in dockerfile and (ROOT / package / "pyproject.toml").exists()
    skaffold = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    assert skaffold["apiVersion"] == "skaffold/v4beta14"
    artifacts = {a["image"]: a["docker"]["dockerfile"] for a in skaffold["build"]["artifacts"]}
    assert artifacts == {"magnetar": "Dockerfile", "magnetar-spark": "spark-jobs/Dockerfile"}
    assert all((ROOT / dockerfile).exists() for dockerfile in artifacts.values())
    [release] = skaffold["deploy"]["helm"]["releases"]
    # skaffold names an image's template variables after it, '-' becoming '_'.
    values = release["setValueTemplates"]
    assert values["image.repository"] == "{{.IMAGE_REPO_magnetar}}"
    assert values["sparkJobs.image.repository"] == "{{.IMAGE_REPO_magnetar_spark}}"
    assert values["sparkJobs.image.tag"] == "{{.IMAGE_TAG_magnetar_spark}}"
    assert (ROOT / release["chartPath"]) == CHART and (CHART / "Chart.yaml").exists()
    assert [p["name"] for p in skaffold["profiles"]] == ["dev"]


def test_the_chart_sets_the_variables_the_local_cluster_sets(tmp_path):
    """What passes locally is what the cluster runs: same entry points, same names."""
    local = LocalCluster(tmp_path, database_url="postgresql://x@127.0.0.1:1/x")
    objects = render()
    workloads = by_kind(objects, "StatefulSet") | by_kind(objects, "Deployment")
    for kind in SERVICES:
        [name] = local.names(kind)[:1]
        local_env = {k for k in local.env_for(name) if k.startswith("MAGNETAR_")}
        workload = workloads[f"rel-magnetar-{kind}"]
        [container] = workload["spec"]["template"]["spec"]["containers"]
        chart_env = {e["name"] for e in container["env"] if e["name"].startswith("MAGNETAR_")}
        assert local_env <= chart_env, f"{kind}: the chart lacks {local_env - chart_env}"
        assert chart_env <= setting_names(kind), f"{kind}: unknown {chart_env - setting_names(kind)}"
        assert container["command"] == [KINDS[kind].command]
