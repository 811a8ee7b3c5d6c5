"""`helm test` (issue 19, item 8) as rendered: a test-hook pod running
files/helm_test.py with the release's broker addresses and authentication settings.
The script itself runs against real processes in tests/e2e/test_helm_test_script.py."""

from __future__ import annotations

from tests.unit.deploy.conftest import CHART, by_kind, render, validate


def helm_test_pod(objects: list[dict]) -> dict:
    return by_kind(objects, "Pod")["rel-magnetar-test"]



def test_a_test_hook_pod_runs_the_script_against_every_broker(tmp_path):
    objects = render("broker.replicaCount=3")
    validate(objects, tmp_path)
    pod = helm_test_pod(objects)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 120
    [container] = spec["containers"]
    assert container["command"][:2] == ["python", "-c"]
    assert container["command"][2] == (CHART / "files" / "helm_test.py").read_text()
    env = {e["name"]: e for e in container["env"]}
    assert env["MAGNETAR_SERVICE_URL"]["value"] == ",".join(
        f"http://rel-magnetar-broker-{i}.rel-magnetar-broker.ns.svc:8080" for i in range(3))
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_pod_gets_the_releases_auth_settings():
    env = {e["name"]: e for e in helm_test_pod(render())["spec"]["containers"][0]["env"]}
    assert env["MAGNETAR_AUTH_ENABLED"]["value"] == "true"
    assert env["MAGNETAR_AUTH_JWT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "rel-magnetar-auth", "key": "jwt-secret"}
    assert env["MAGNETAR_AUTH_SERVICE_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "service-token"
    rs256 = {e["name"]: e for e in helm_test_pod(render(
        "auth.jwt.publicKey=-----BEGIN PUBLIC KEY-----", "auth.serviceToken=tok"))["spec"]["containers"][0]["env"]}
    assert "MAGNETAR_AUTH_SERVICE_TOKEN" in rs256  # RS256: the given service token
    off = {e["name"]: e for e in helm_test_pod(render("auth.enabled=false"))["spec"]["containers"][0]["env"]}
    assert off["MAGNETAR_AUTH_ENABLED"]["value"] == "false" and "MAGNETAR_AUTH_JWT_SECRET" not in off


def test_it_can_be_turned_off():
    assert "rel-magnetar-test" not in by_kind(render("tests.enabled=false"), "Pod")


def test_the_pod_can_be_placed_like_the_services(tmp_path):
    """On a cluster whose nodes are all tainted, an unplaceable test pod would only
    time out."""
    objects = render("tests.nodeSelector.pool=magnetar", "tests.priorityClassName=low",
                     "tests.tolerations[0].key=dedicated", "tests.tolerations[0].operator=Exists")
    validate(objects, tmp_path)
    spec = helm_test_pod(objects)["spec"]
    assert spec["nodeSelector"] == {"pool": "magnetar"} and spec["priorityClassName"] == "low"
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
