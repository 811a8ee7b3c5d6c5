"""The chart's `helm test` script (charts/magnetar/files/helm_test.py), run as the test
pod runs it (`python -c <file>`, the release's MAGNETAR_AUTH_* variables) against real
Magnetar processes with authentication on: it passes on a working release and fails
loudly, exit 1 with the reason, otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

SCRIPT = (Path(__file__).resolve().parents[2] / "charts" / "magnetar" / "files" / "helm_test.py").read_text()
SECRET = "test-secret-of-at-least-32-bytes-long"
AUTH_ENV = {"MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
            "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"}


def run_helm_test(cluster, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAGNETAR_")}
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={**clean, "MAGNETAR_SERVICE_URL": ",".join(cluster.broker_urls), **env})


@pytest.mark.cluster(env=AUTH_ENV)
def test_helm_test_passes_through_a_working_release_and_fails_loudly_otherwise(cluster):
    ok = run_helm_test(cluster, **AUTH_ENV)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "committed its acknowledgement" in ok.stdout and "passed" in ok.stdout
    # The release's token is wrong (another secret): every step is refused.
    wrong = run_helm_test(cluster, **{**AUTH_ENV, "MAGNETAR_AUTH_JWT_SECRET": "x" * 40})
    assert wrong.returncode == 1
    assert "helm test: FAILED: AuthenticationError" in wrong.stderr
    # No token at all (auth off in the pod, on in the release).
    none = run_helm_test(cluster, MAGNETAR_AUTH_ENABLED="false")
    assert none.returncode == 1 and "FAILED" in none.stderr
