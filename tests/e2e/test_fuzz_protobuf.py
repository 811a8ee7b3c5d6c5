"""Bounded protobuf fuzz of every broker, coordinator and registry route (issue 20).

A real cluster with JWT authentication on; seeded requests (tests/e2e/fuzzing.py) sent
as a superuser, as an ordinary role and with no token, each with ids harvested for one
role or the other.  Fails on any 5xx, any request without an answer within its deadline,
and any service process that died.  Prints the seed and the counts by status.

    MAGNETAR_FUZZ_SEED=7 MAGNETAR_FUZZ_REQUESTS=20000 .venv/bin/pytest tests/e2e/test_fuzz_protobuf.py -s

The default (3000 requests: three rounds, each with all four kinds of request, some 75
straight to each of the 30 routes; the test checks that every route was reached) is sized
for CI's time; a longer hunt sets MAGNETAR_FUZZ_REQUESTS.
"""

from __future__ import annotations

import asyncio
import os

import jwt
import pytest

from tests.e2e import fuzzing

SECRET = "fuzz-secret-of-at-least-thirty-two-bytes!"
AUTH_ENV = {
    "MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
    "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin",
    # Long polls (fetch, WaitForExclusive) answer well within the per-request deadline.
    "MAGNETAR_MAX_FETCH_WAIT_MS": "500",
    # The harvested sessions (and their producers and consumers) outlive a round.
    "MAGNETAR_SESSION_TIMEOUT_MS": "60000",
}
SEED = int(os.environ.get("MAGNETAR_FUZZ_SEED", "20"))
REQUESTS = int(os.environ.get("MAGNETAR_FUZZ_REQUESTS", "3000"))
ROUND = 1000  # requests between two harvests: the fuzz closes sessions, ends transactions
DEADLINE_S = 15.0  # per request; a 2-core machine shared by a whole cluster is slow


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def service_urls(cluster) -> dict[str, list[str]]:
    urls = {"broker": cluster.broker_urls, "coordinator": cluster.coordinator_urls,
            "registry": [cluster.url(n) for n in cluster.names("registry")]}
    assert all(urls.values()), f"the fuzz needs every service kind running: {urls}"
    return urls


@pytest.mark.timeout(600)
@pytest.mark.cluster(env=AUTH_ENV)
def test_protobuf_routes_answer_bad_input_with_4xx(cluster):
    urls = service_urls(cluster)
    tokens = [token("admin"), token("alice"), None]
    routes = fuzzing.discover_routes()
    assert sum(map(len, routes.values())) >= 30, routes  # every api.py was read

    async def fuzz():
        total = fuzzing.Outcome()
        started = fuzzing.now()
        for first in range(0, REQUESTS, ROUND):
            harvests = [await fuzzing.harvest(urls, tokens[0], f"admin-{first}"),
                        await fuzzing.harvest(urls, tokens[1], f"alice-{first}")]
            assert harvests[0].producers and harvests[0].consumers and harvests[0].txns, (
                f"the superuser could not set up the ids the fuzz mutates: {harvests[0]}")
            calls = fuzzing.plan(SEED + first, min(ROUND, REQUESTS - first), routes, harvests,
                                 len(tokens))
            total.add(await fuzzing.run(calls, urls, tokens, deadline_s=DEADLINE_S))
            if total.failures:
                break
        return total, fuzzing.now() - started

    outcome, elapsed = asyncio.run(fuzz())
    print("\n" + fuzzing.describe(outcome, SEED, elapsed))
    for failure in outcome.failures[:15]:
        print("  " + failure[:2000])
    dead = [name for name, svc in cluster.services.items() if not svc.alive]
    assert not dead, f"service process(es) died during the fuzz (seed {SEED}): {dead}"
    for name in cluster.services:
        cluster.wait_ready(name, timeout=30)
    assert not outcome.failures, (
        f"{len(outcome.failures)} request(s) got a 5xx or no answer (seed {SEED}); the first:\n"
        + "\n".join(outcome.failures[:15]))
    missed = {path for paths in routes.values() for path, _ in paths} - set(outcome.by_route)
    assert not missed, f"routes the fuzz never reached (raise MAGNETAR_FUZZ_REQUESTS): {sorted(missed)}"
    assert outcome.sent == REQUESTS
