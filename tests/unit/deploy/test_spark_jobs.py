"""The chart's Spark jobs (``components.sparkJobs``) and their image (spark-jobs/Dockerfile):
what the jobs of spark-jobs/ need to run in a cluster.  The rendered objects are also
validated with kubernetes-validate --strict (the "Spark jobs on" value set of
test_chart.py)."""

from __future__ import annotations

import re

import pytest

from tests.unit.deploy.conftest import ROOT, by_kind, render
from tests.unit.deploy.test_chart import VALUE_SETS

SPARK = VALUE_SETS["Spark jobs on"]
JOBS_DIR = "/opt/magnetar/jobs"  # where spark-jobs/Dockerfile puts the jobs


def spark_objects(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            == "spark-job"]


def pod_of(workload: dict) -> dict:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


def test_off_by_default():
    assert not spark_objects(render())


def test_jobs_run_spark_submit_on_a_script_of_the_image_against_this_release():
    objects = render(*SPARK, "broker.replicaCount=3", "admin.service.port=9090")
    jobs, crons = by_kind(objects, "Job"), by_kind(objects, "CronJob")
    [enrich] = [j for name, j in jobs.items() if name.startswith("rel-magnetar-spark-enrich-")]
    [windowed] = [j for name, j in jobs.items() if name.startswith("rel-magnetar-spark-windowed-counts-")]
    archive = crons["rel-magnetar-spark-archive-orders"]
    assert archive["spec"]["schedule"] == "0 3 * * *"
    assert archive["spec"]["concurrencyPolicy"] == "Forbid"
    for workload, script in ((enrich, "enrich.py"), (windowed, "windowed_counts.py"),
                             (archive, "archive.py")):
        pod = pod_of(workload)
        [container] = pod["containers"]
        assert container["image"] == "magnetar-spark:0.1.0"
        assert container["command"] == ["spark-submit"]
        args = container["args"]
        assert args[:2] == ["--master", "local[2]"]
        assert args[2] == f"{JOBS_DIR}/{script}"
        env = {e["name"]: e for e in container["env"]}
        assert env["MAGNETAR_SERVICE_URL"]["value"].split(",") == [
            f"http://rel-magnetar-broker-{i}.rel-magnetar-broker.ns.svc:8080" for i in range(3)]
        assert env["MAGNETAR_ADMIN_URL"]["value"] == "http://rel-magnetar-admin.ns.svc:9090"
        assert env["MAGNETAR_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "spark-token", "key": "token"}
        # Non-root, no API token, read-only root with /tmp for Spark's scratch space, and
        # the job's own volume for checkpoints.
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts == {"/tmp": "tmp", "/data": "data"}
        claim = {v["name"]: v for v in pod["volumes"]}["data"]["persistentVolumeClaim"]["claimName"]
        assert claim in by_kind(objects, "PersistentVolumeClaim")
    assert "--checkpoint" in pod_of(enrich)["containers"][0]["args"]


def job_file(name: str):
    """spark-jobs/<name>; skipped (saying so) while issue #6's jobs are not committed yet:
    the chart and the jobs land separately, and the checks below run once both exist."""
    path = ROOT / "spark-jobs" / name
    if not path.is_file() and not (ROOT / "spark-jobs" / "jobcommon.py").is_file():
        pytest.skip(f"spark-jobs/{name}: the jobs of issue #6 are not in the tree yet")
    return path


def test_the_variables_are_the_ones_the_jobs_read():
    jobcommon = job_file("jobcommon.py").read_text()
    for name in ("MAGNETAR_SERVICE_URL", "MAGNETAR_ADMIN_URL", "MAGNETAR_AUTH_TOKEN"):
        assert f'"{name}"' in jobcommon, f"spark-jobs/jobcommon.py no longer reads {name}"


def test_spark_conf_script_paths_and_auth():
    objects = render(*SPARK, "sparkJobs.sparkConf.spark\\.sql\\.shuffle\\.partitions=8",
                     "sparkJobs.jobs.enrich.sparkConf.spark\\.sql\\.shuffle\\.partitions=2",
                     "sparkJobs.jobs.enrich.script=/opt/custom/job.py")
    [enrich] = [j for n, j in by_kind(objects, "Job").items() if "spark-enrich" in n]
    args = pod_of(enrich)["containers"][0]["args"]
    assert args[2:5] == ["--conf", "spark.sql.shuffle.partitions=2", "/opt/custom/job.py"]  # the job's own wins
    # Authentication is on by default: without a token Secret the chart refuses, saying why.
    error = render("components.sparkJobs=true", expect_failure=True)
    assert "sparkJobs.authTokenSecret.name" in error
    open_cluster = render("components.sparkJobs=true", "auth.enabled=false")
    for workload in spark_objects(open_cluster):
        if workload["kind"] in ("Job", "CronJob"):
            names = {e["name"] for e in pod_of(workload)["containers"][0]["env"]}
            assert "MAGNETAR_AUTH_TOKEN" not in names
    assert "jobs" in render(*SPARK, "sparkJobs.jobs.Bad_Name.script=x.py", expect_failure=True)
    assert "script" in render(*SPARK, "sparkJobs.jobs.nojob.enabled=true", expect_failure=True)


def test_a_changed_job_is_a_new_job_because_a_job_template_cannot_change():
    def job_name(*extra: str) -> str:
        return next(n for n in by_kind(render(*SPARK, *extra), "Job") if "spark-enrich" in n)
    assert job_name() == job_name()
    assert job_name("sparkJobs.image.tag=0.2.0") != job_name()
    assert job_name("sparkJobs.jobs.enrich.args={--checkpoint,/data/other}") != job_name()
    assert all(len(n) <= 63 for n in by_kind(render(*SPARK), "Job"))


def test_spark_image_dockerfile():
    dockerfile = (ROOT / "spark-jobs" / "Dockerfile").read_text()
    assert dockerfile.count("FROM ") == 2 and "USER 10001" in dockerfile  # multi-stage, non-root
    assert re.search(r'"pyspark(\[sql\])?>=4\.\d+,<5"', dockerfile), "PySpark 4 is installed"
    assert '"magnetar[spark]"' in dockerfile  # the client with its data source's dependencies
    assert "openjdk-17-jre-headless" in dockerfile  # PySpark 4 needs Java 17+
    for package in ("libs/protocol", "libs/client"):
        assert f"./{package}" in dockerfile and (ROOT / package / "pyproject.toml").exists()
    assert f"COPY spark-jobs/*.py {JOBS_DIR}/" in dockerfile
    assert f"PYTHONPATH={JOBS_DIR}" in dockerfile  # jobcommon/transforms on workers too
    # The pod's user is the image's user.
    objects = render(*SPARK)
    [enrich] = [j for n, j in by_kind(objects, "Job").items() if "spark-enrich" in n]
    assert pod_of(enrich)["securityContext"]["runAsUser"] == 10001


@pytest.mark.parametrize("job", ["enrich", "windowed-counts", "archive-orders"])
def test_default_jobs_name_scripts_that_exist(job):
    objects = render("components.sparkJobs=true", "auth.enabled=false",
                     f"sparkJobs.jobs.{job}.enabled=true")
    workloads = [o for o in spark_objects(objects) if o["kind"] in ("Job", "CronJob")
                 and o["metadata"]["labels"]["magnetar.io/spark-job"] == job]
    [workload] = workloads
    script = pod_of(workload)["containers"][0]["args"][2]
    assert script.startswith(JOBS_DIR + "/")
    assert job_file(script.removeprefix(JOBS_DIR + "/")).is_file(), f"the chart runs {script}, which spark-jobs/ lacks"
