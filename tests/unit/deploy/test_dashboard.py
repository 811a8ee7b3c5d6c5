"""The Grafana dashboard (charts/magnetar/dashboards/magnetar.json, shipped as a ConfigMap
with ``monitoring.grafanaDashboard.enabled``) only queries metrics the services export,
under the names Prometheus sees (a Counter ``x`` is scraped as ``x_total``)."""

from __future__ import annotations

import json
import re

from prometheus_client import REGISTRY

import magnetar_broker.metrics  # noqa: F401 (registers the broker's metrics)
import magnetar_coordinator.metrics  # noqa: F401
import magnetar_registry.metrics  # noqa: F401
from tests.unit.deploy.conftest import CHART, by_kind, render

SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("", "_sum", "_count")}


def exported() -> dict[str, set[str]]:
    """Every scraped series name of the services' metrics -> its label names."""
    names: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        collector = REGISTRY._names_to_collectors.get(family.name) or \
            REGISTRY._names_to_collectors.get(family.name + "_total")
        labels = set(getattr(collector, "_labelnames", ()) or getattr(collector, "label_names", ()))
        if "namespace" in labels:
            # Pulsar's namespace label meets the pod's: Prometheus renames the scraped one.
            labels.add("exported_namespace")
        for suffix in SUFFIXES.get(family.type, ("",)):
            names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


def dashboard() -> dict:
    return json.loads((CHART / "dashboards" / "magnetar.json").read_text())


def test_every_query_names_an_exported_metric_and_its_labels():
    metrics = exported()
    queries = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    assert len(queries) >= 20
    for expr in queries:
        used = set(re.findall(r"\b((?:pulsar|magnetar)_[a-z_]+)\b", expr))
        assert used, expr
        for name in used:
            assert name in metrics, f"{name} (in {expr}) is not exported by any service"
            # `by (...)` labels: the metric's own, or those Prometheus adds to every pod.
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (g.strip() for g in group.split(",")):
                    assert label in metrics[name] | {"pod", "namespace"}, (label, expr)


def test_the_chart_ships_the_file_unchanged_when_asked():
    assert "rel-magnetar-grafana-dashboard" not in by_kind(render(), "ConfigMap")
    objects = render("monitoring.grafanaDashboard.enabled=true")
    config_map = by_kind(objects, "ConfigMap")["rel-magnetar-grafana-dashboard"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["magnetar.json"]) == dashboard()
