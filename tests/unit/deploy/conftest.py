"""Rendering the Helm chart with the real helm binary (installed by `make test` into
.venv/bin/helm via .ci/install-helm).  A missing helm fails these tests: it is never a
skip."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "magnetar"


def helm_binary() -> str:
    candidates = [os.environ.get("MAGNETAR_HELM"), str(Path(sys.executable).parent / "helm"),
                  shutil.which("helm")]
    for path in candidates:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail("helm not found: run `bash .ci/install-helm .venv/bin/helm` (make test does) "
                "or set MAGNETAR_HELM")


# Rendered charts by their inputs, for the whole session: helm takes ~0.5 s a render and
# the deploy tests ask for the same few value sets dozens of times.  Each caller gets its
# own deep copy, so a test that edits what it got changes nothing for the next one.
_rendered: dict[tuple, tuple[int, str, list[dict] | None]] = {}


def render(*sets: str, expect_failure: bool = False, values: tuple[Path, ...] = (),
           kube_version: str | None = None, fresh: bool = False) -> list[dict] | str:
    """The chart rendered with ``--set`` values (after the ``values`` files): every
    object, or helm's error text.  The same inputs render once per session unless
    ``fresh`` (a test of what differs between two renders)."""
    args = [helm_binary(), "template", "rel", str(CHART), "--namespace", "ns"]
    for path in values:
        args += ["--values", str(path)]
    if kube_version:
        args += ["--kube-version", kube_version]
    for s in sets:
        args += ["--set", s]
    # A values file is part of the input by its content: tests write them to temporary paths.
    key = (tuple(args), tuple(Path(p).read_bytes() for p in values))
    if fresh or key not in _rendered:
        result = subprocess.run(args, capture_output=True, text=True, timeout=120)
        objects = ([doc for doc in yaml.safe_load_all(result.stdout) if doc]
                   if result.returncode == 0 else None)
        _rendered[key] = (result.returncode, result.stderr, objects)
    returncode, stderr, objects = _rendered[key]
    if expect_failure:
        assert returncode != 0, "helm template should have failed"
        return stderr
    assert returncode == 0, stderr
    return copy.deepcopy(objects)


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def env_of(workload: dict) -> dict[str, dict]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


def validate(objects: list[dict], folder: Path, kubernetes: str | None = None) -> None:
    """Every object valid for Kubernetes (kubernetes-validate --strict: no unknown
    fields), at its newest version or ``kubernetes`` (e.g. "1.28.0")."""
    path = folder / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    validator = Path(sys.executable).parent / "kubernetes-validate"
    version = ["--kubernetes-version", kubernetes] if kubernetes else []
    result = subprocess.run([str(validator), "--strict", "--quiet", *version, str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]
