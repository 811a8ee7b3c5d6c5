"""The chart's access from outside the cluster (templates/external.yaml): a NodePort or
LoadBalancer Service per broker and coordinator pod, one for the registries, and the
`external` advertised listener each pod is given — checked to name exactly the
address its own Service is reached at."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from magnetar_protocol.listeners import expand_pod_index, parse_listeners
from tests.unit.deploy.conftest import CHART, by_kind, env_of, helm_binary, validate

NODE_PORT = {"external": {"enabled": True, "host": "203.0.113.10"},
             "broker": {"replicaCount": 3}, "coordinator": {"replicaCount": 2}}
LOAD_BALANCER = {"external": {
    "enabled": True, "type": "LoadBalancer", "host": "{component}-{pod_index}.mq.example.com",
    "registry": {"host": "registry.mq.example.com",
                 "annotations": {"external-dns.alpha.kubernetes.io/hostname": "registry.mq.example.com"}},
    "annotations": {"external-dns.alpha.kubernetes.io/hostname": "{component}-{pod_index}.mq.example.com"},
    "loadBalancerSourceRanges": ["203.0.113.0/24"], "externalTrafficPolicy": "Local"}}
HOSTED = {"external": {"enabled": True, "host": "203.0.113.10"},
          "components": {"coordinator": False}, "broker": {"hostCoordinator": True}}


def render_values(values: dict, tmp_path: Path, expect_failure: bool = False):
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = subprocess.run([helm_binary(), "template", "rel", str(CHART), "--namespace", "ns",
                             "-f", str(path)], capture_output=True, text=True, timeout=120)
    if expect_failure:
        assert result.returncode != 0, "helm template should have failed"
        return result.stderr
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def external_services(objects) -> dict[str, dict]:
    return {n: s for n, s in by_kind(objects, "Service").items() if n.endswith("-external")}


def advertised(workload: dict, pod_index: int | None) -> dict[str, str]:
    """The listeners the process in pod ``pod_index`` of ``workload`` advertises, as
    its settings would read them."""
    env = env_of(workload)
    if "MAGNETAR_POD_INDEX" in env:
        assert env["MAGNETAR_POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.labels['apps.kubernetes.io/pod-index']"
    return parse_listeners(expand_pod_index(env["MAGNETAR_ADVERTISED_LISTENERS"]["value"], pod_index))


@pytest.mark.parametrize("values", [NODE_PORT, LOAD_BALANCER, HOSTED],
                         ids=["NodePort", "LoadBalancer", "hosted coordinators"])
def test_every_rendered_object_is_valid_kubernetes(values, tmp_path):
    validate(render_values(values, tmp_path), tmp_path)


def test_off_by_default(tmp_path):
    objects = render_values({}, tmp_path)
    assert external_services(objects) == {}
    for workload in [*by_kind(objects, "StatefulSet").values(), *by_kind(objects, "Deployment").values()]:
        if workload["metadata"]["name"] != "rel-magnetar-postgresql":
            assert "MAGNETAR_ADVERTISED_LISTENERS" not in env_of(workload)


def test_node_ports_one_service_per_pod_and_each_pod_advertises_its_own(tmp_path):
    objects = render_values(NODE_PORT, tmp_path)
    services = external_services(objects)
    sets = by_kind(objects, "StatefulSet")
    for component, replicas, base in (("broker", 3, 30080), ("coordinator", 2, 30090)):
        for i in range(replicas):
            svc = services.pop(f"rel-magnetar-{component}-{i}-external")
            assert svc["spec"]["type"] == "NodePort"
            assert svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == \
                f"rel-magnetar-{component}-{i}"
            assert svc["spec"]["selector"]["app.kubernetes.io/component"] == component
            port, *pulsar_port = svc["spec"]["ports"]
            assert port["nodePort"] == base + i and port["targetPort"] == "http"
            # The pod this Service selects advertises the address the Service opens.
            assert advertised(sets[f"rel-magnetar-{component}"], i) == {
                "external": f"http://203.0.113.10:{base + i}"}
            if component == "broker":   # and its Pulsar port, as a named Pulsar listener
                assert pulsar_port == [{"name": "pulsar", "targetPort": "pulsar", "port": 6650,
                                        "nodePort": 30650 + i}]
                env = env_of(sets["rel-magnetar-broker"])
                assert parse_listeners(expand_pod_index(env["MAGNETAR_ADVERTISED_PULSAR_LISTENERS"]["value"], i),
                                       pulsar=True) == {"external": f"pulsar://203.0.113.10:{30650 + i}"}
            else:
                assert pulsar_port == []
    registry = services.pop("rel-magnetar-registry-external")
    assert "statefulset.kubernetes.io/pod-name" not in registry["spec"]["selector"]
    assert registry["spec"]["ports"][0]["nodePort"] == 30070
    assert advertised(by_kind(objects, "Deployment")["rel-magnetar-registry"], None) == {
        "external": "http://203.0.113.10:30070"}
    assert services == {}  # nothing else: no admin, no PostgreSQL exposed


def test_load_balancers_get_per_pod_names_and_annotations(tmp_path):
    objects = render_values(LOAD_BALANCER, tmp_path)
    services = external_services(objects)
    svc = services["rel-magnetar-coordinator-0-external"]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    assert svc["metadata"]["annotations"] == {
        "external-dns.alpha.kubernetes.io/hostname": "coordinator-0.mq.example.com"}
    assert services["rel-magnetar-broker-1-external"]["metadata"]["annotations"] == {
        "external-dns.alpha.kubernetes.io/hostname": "broker-1.mq.example.com"}
    assert services["rel-magnetar-registry-external"]["metadata"]["annotations"] == {
        "external-dns.alpha.kubernetes.io/hostname": "registry.mq.example.com"}
    sets = by_kind(objects, "StatefulSet")
    assert advertised(sets["rel-magnetar-broker"], 1) == {"external": "http://broker-1.mq.example.com:8080"}
    assert advertised(sets["rel-magnetar-coordinator"], 0) == {
        "external": "http://coordinator-0.mq.example.com:8080"}


def test_hosted_coordinators_are_reached_through_their_brokers(tmp_path):
    objects = render_values(HOSTED, tmp_path)
    assert sorted(external_services(objects)) == [
        "rel-magnetar-broker-0-external", "rel-magnetar-broker-1-external",
        "rel-magnetar-registry-external"]
    assert advertised(by_kind(objects, "StatefulSet")["rel-magnetar-broker"], 1) == {
        "external": "http://203.0.113.10:30081"}


@pytest.mark.parametrize("values,why", [
    ({"external": {"enabled": True}}, "set external.host"),
    ({"external": {"enabled": True, "host": "b-{pod_index}.example.com"}}, "external.registry.host"),
    ({"external": {"enabled": True, "host": "h", "type": "ClusterIP"}}, "NodePort"),
    ({"external": {"enabled": True, "host": "h", "broker": {"nodePortBase": 70000}}}, "nodePortBase"),
])
def test_a_broken_external_setting_fails_the_render_saying_what_to_set(values, why, tmp_path):
    assert why in render_values(values, tmp_path, expect_failure=True)
