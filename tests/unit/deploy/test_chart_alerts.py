"""The chart's PrometheusRule (monitoring.prometheusRule) and topic-metrics settings.
kubernetes-validate has no schema for the Prometheus operator's CRDs, so the rule's shape
is checked here against the fields the PrometheusRule CRD (monitoring.coreos.com/v1)
defines; everything else rendered with it is validated as usual."""

from __future__ import annotations

import re

from tests.unit.deploy.conftest import by_kind, env_of, render, validate
from tests.unit.deploy.test_dashboard import exported

# PrometheusRule CRD, monitoring.coreos.com/v1: spec.groups[] and groups[].rules[] fields.
GROUP_FIELDS = {"name", "interval", "rules", "partial_response_strategy", "limit", "query_offset", "labels"}
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")


def rule_object(*sets: str) -> tuple[dict, list[dict]]:
    objects = render("monitoring.prometheusRule.enabled=true", *sets)
    [rule] = [o for o in objects if o["kind"] == "PrometheusRule"]
    return rule, [o for o in objects if o["kind"] != "PrometheusRule"]


def test_off_by_default():
    assert not [o for o in render() if o["kind"] == "PrometheusRule"]


def test_the_rule_has_the_crd_shape_and_the_rest_stays_valid(tmp_path):
    rule, others = rule_object("monitoring.prometheusRule.labels.release=kps")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert rule["metadata"]["name"] == "rel-magnetar" and rule["metadata"]["labels"]["release"] == "kps"
    assert set(rule["spec"]) == {"groups"}
    names = set()
    for group in rule["spec"]["groups"]:
        assert set(group) <= GROUP_FIELDS and isinstance(group["name"], str) and group["rules"]
        for r in group["rules"]:
            assert set(r) <= RULE_FIELDS, set(r) - RULE_FIELDS
            assert re.fullmatch(r"[A-Z][A-Za-z]+", r["alert"]) and isinstance(r["expr"], str)
            assert DURATION.match(r["for"]), r["for"]
            assert r["labels"]["severity"] in {"info", "warning", "critical"}
            assert all(isinstance(v, str) for v in r["annotations"].values())
            assert {"summary", "description"} <= set(r["annotations"])
            assert r["expr"].count("(") == r["expr"].count(")") and r["expr"].count("{") == r["expr"].count("}")
            names.add(r["alert"])
    assert {"MagnetarBacklogGrowing", "MagnetarStorageHigh", "MagnetarStorageGrowing"} <= names
    validate(others, tmp_path)


def test_the_alerts_query_exported_metrics_of_this_release_with_the_configured_thresholds():
    rule, _ = rule_object("monitoring.prometheusRule.backlogMessages=5000",
                          "monitoring.prometheusRule.backlogGrowingFor=30m",
                          "monitoring.prometheusRule.storageBytes=2000000000")
    metrics = exported()
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    for r in rules.values():
        used = set(re.findall(r"\b((?:pulsar|magnetar)_[a-z_]+)\b", r["expr"]))
        assert used
        for name in used:
            assert name in metrics, f"{name} is not exported by any service"
            assert f'{name}{{namespace="ns"}}' in r["expr"], "scoped to the release's namespace"
        for group in re.findall(r"by \(([^)]*)\)", r["expr"]):
            for label in (g.strip() for g in group.split(",")):
                assert all(label in metrics[n] for n in used), (label, r["expr"])
    backlog = rules["MagnetarBacklogGrowing"]
    assert "> 5000" in backlog["expr"] and "[30m]" in backlog["expr"] and backlog["for"] == "30m"
    assert "> 2000000000" in rules["MagnetarStorageHigh"]["expr"]
    assert "> 2000000000" in rules["MagnetarStorageGrowing"]["expr"]


def test_bad_alert_values_are_refused():
    assert "backlogGrowingFor" in render("monitoring.prometheusRule.backlogGrowingFor=soon", expect_failure=True)
    assert "storageBytes" in render("monitoring.prometheusRule.storageBytes=-1", expect_failure=True)
    assert "threshold" in render("monitoring.prometheusRule.threshold=1", expect_failure=True)


def test_topic_metrics_settings_reach_the_brokers():
    broker = by_kind(render(), "StatefulSet")["rel-magnetar-broker"]
    env = env_of(broker)
    assert env["MAGNETAR_METRICS_PER_TOPIC"]["value"] == "false"
    assert env["MAGNETAR_METRICS_MAX_TOPICS"]["value"] == "1000"
    broker = by_kind(render("monitoring.topicMetrics.perTopic=true", "monitoring.topicMetrics.maxTopics=50"),
                     "StatefulSet")["rel-magnetar-broker"]
    env = env_of(broker)
    assert env["MAGNETAR_METRICS_PER_TOPIC"]["value"] == "true"
    assert env["MAGNETAR_METRICS_MAX_TOPICS"]["value"] == "50"
    assert "maxTopics" in render("monitoring.topicMetrics.maxTopics=-3", expect_failure=True)
