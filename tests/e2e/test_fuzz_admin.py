"""Bounded schemathesis pass over the admin's OpenAPI (issue 20): a real cluster with JWT
authentication on, as a superuser, as an ordinary role and with no token.  Fails on any
5xx (schemathesis' ``not_a_server_error`` check), any request without an answer within
its deadline, and any service process that died.  Prints the seed and the counts of
requests by status (from schemathesis' HAR report).

    MAGNETAR_FUZZ_SEED=7 MAGNETAR_FUZZ_ADMIN_EXAMPLES=200 .venv/bin/pytest tests/e2e/test_fuzz_admin.py -s

The default (10 examples per operation and token, every phase: examples, coverage,
fuzzing) is sized for CI's time; a longer hunt sets MAGNETAR_FUZZ_ADMIN_EXAMPLES.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import jwt
import pytest

SECRET = "fuzz-secret-of-at-least-thirty-two-bytes!"
AUTH_ENV = {"MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
            "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"}
SEED = int(os.environ.get("MAGNETAR_FUZZ_SEED", "20"))
EXAMPLES = int(os.environ.get("MAGNETAR_FUZZ_ADMIN_EXAMPLES", "10"))  # per operation and token
DEADLINE_S = 15


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def openapi(admin_url: str, out: Path) -> Path:
    """The admin's OpenAPI document, read as a superuser (it is not public), so every
    pass tests the same operations."""
    request = urllib.request.Request(f"{admin_url}/openapi.json",
                                     headers={"Authorization": f"Bearer {token('admin')}"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        path = out / "openapi.json"
        path.write_bytes(resp.read())
    return path


def schemathesis(admin_url: str, schema: Path, who: str, auth: str | None,
                 out: Path) -> tuple[int, str, Path]:
    har = out / f"{who}.har"
    command = [
        str(Path(sys.executable).parent / "st"), "run", str(schema), "--url", admin_url,
        "--checks", "not_a_server_error", "--seed", str(SEED), "--max-examples", str(EXAMPLES),
        # One worker: with two threads, CPython 3.11.7's ast.parse (hypothesis describing
        # a strategy) fails with "SystemError: AST constructor recursion depth mismatch".
        "--workers", "1", "--request-timeout", str(DEADLINE_S), "--no-shrink",
        "--phases", "examples,coverage,fuzzing", "--suppress-health-check", "all",
        "--report", "har", "--report-har-path", str(har), "--max-failures", "20",
    ]
    if auth:
        command += ["--header", f"Authorization: Bearer {auth}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out,
                          env=os.environ | {"NO_COLOR": "1"})
    return done.returncode, done.stdout + done.stderr, har


def statuses(har: Path) -> collections.Counter:
    """Answers by HTTP status; "no answer" for a request that got none."""
    counts: collections.Counter = collections.Counter()
    if har.exists():
        for entry in json.loads(har.read_text())["log"]["entries"]:
            counts[entry["response"]["status"] or "no answer"] += 1
    return counts


@pytest.mark.timeout(900)
@pytest.mark.cluster(env=AUTH_ENV, brokers=1)
def test_admin_api_answers_bad_input_with_4xx(cluster, tmp_path):
    total: collections.Counter = collections.Counter()
    failed = []
    schema = openapi(cluster.admin_url, tmp_path)
    for who, auth in (("superuser", token("admin")), ("ordinary role", token("alice")),
                      ("no token", None)):
        code, output, har = schemathesis(cluster.admin_url, schema, who.replace(" ", "-"), auth,
                                         tmp_path)
        counts = statuses(har)
        total.update(counts)
        print(f"\nschemathesis seed={SEED} as {who}: {sum(counts.values())} requests; by status: "
              + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=str)))
        server_errors = sum(v for k, v in counts.items() if k == "no answer" or k >= 500)
        if code != 0 or server_errors or not counts:
            failed.append(f"---- as {who} (exit {code}, {server_errors} 5xx or unanswered):\n"
                          + output[-6000:])
    print(f"schemathesis total: {sum(total.values())} requests; by status: "
          + ", ".join(f"{k}: {v}" for k, v in sorted(total.items(), key=str)))
    dead = [name for name, svc in cluster.services.items() if not svc.alive]
    assert not dead, f"service process(es) died during the fuzz (seed {SEED}): {dead}"
    assert not failed, "\n".join(failed)
