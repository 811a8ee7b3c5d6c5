"""The local cluster's pure parts: instance names, ports, and the environment each
service gets (issue #7 compares these names with the Helm chart's)."""

from __future__ import annotations

import types

import pytest

from magnetar_runtime.local import cli
from magnetar_runtime.local.cluster import KINDS, LocalCluster, fixed_ports, plan

COMMON = {"MAGNETAR_DATABASE_URL", "MAGNETAR_HOST", "MAGNETAR_PORT", "MAGNETAR_ADVERTISED_URL",
          "MAGNETAR_LOG_FORMAT"}
DB = "postgresql://magnetar@127.0.0.1:5999/magnetar"


def test_default_plan_is_two_brokers_a_coordinator_the_registry_and_the_admin_service():
    assert [name for name, _, _ in plan({k: v.count for k, v in KINDS.items()})] == [
        "broker-0", "broker-1", "coordinator-0", "registry", "admin"]


def test_plan_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown service kind"):
        plan({"brokr": 1})


def test_fixed_ports_are_the_documented_ones():
    assert fixed_ports({}) == {"broker-0": 8080, "broker-1": 8082, "coordinator-0": 8090,
                               "registry": 8070, "admin": 8081,
                               "broker-0/pulsar": 6650, "broker-1/pulsar": 6651}
    ports = fixed_ports({"broker": 4, "coordinator": 2})
    assert [ports[f"broker-{i}"] for i in range(4)] == [8080, 8082, 8083, 8084]
    assert len(set(ports.values())) == len(ports)


def test_free_ports_are_distinct_and_fixed_ports_are_kept(tmp_path):
    cluster = LocalCluster(tmp_path, services={"broker": 5}, ports={"admin": 18081},
                           database_url=DB)
    ports = [svc.port for svc in cluster.services.values()]
    assert len(set(ports)) == len(ports)
    assert cluster.services["admin"].port == 18081
    assert cluster.admin_url == "http://127.0.0.1:18081"
    assert cluster.service_url == cluster.broker_urls[0] == cluster.url("broker-0")
    pulsar = [svc.pulsar_port for svc in cluster.services.values() if svc.kind == "broker"]
    assert len(pulsar) == 5 and not set(pulsar) & set(ports) and len(set(pulsar)) == 5
    assert cluster.pulsar_service_url == f"pulsar://127.0.0.1:{pulsar[0]}"


def test_each_kind_gets_exactly_its_variables(tmp_path):
    cluster = LocalCluster(tmp_path, ports=fixed_ports({}), database_url=DB)
    assert cluster.env_for("broker-1") == {
        "MAGNETAR_DATABASE_URL": DB,
        "MAGNETAR_HOST": "127.0.0.1",
        "MAGNETAR_PORT": "8082",
        "MAGNETAR_ADVERTISED_URL": "http://127.0.0.1:8082",
        "MAGNETAR_LOG_FORMAT": "text",
        "MAGNETAR_BROKER_ID": "broker-1",
        "MAGNETAR_PULSAR_PORT": "6651",
        "MAGNETAR_ADVERTISED_PULSAR_URL": "pulsar://127.0.0.1:6651",
    }
    assert set(cluster.env_for("coordinator-0")) == COMMON | {"MAGNETAR_COORDINATOR_ID"}
    assert cluster.env_for("coordinator-0")["MAGNETAR_COORDINATOR_ID"] == "0"
    assert set(cluster.env_for("admin")) == COMMON


def test_brokers_can_host_the_coordinators_instead_of_coordinator_processes(tmp_path):
    cluster = LocalCluster(tmp_path, coordinator_in_broker=True, database_url=DB)
    assert cluster.names("coordinator") == []
    for i in (0, 1):
        env = cluster.env_for(f"broker-{i}")
        assert env["MAGNETAR_HOST_COORDINATOR"] == "true"
        assert env["MAGNETAR_COORDINATOR_ID"] == str(i)  # one TCID per broker
    with pytest.raises(ValueError, match="brokers host the coordinators"):
        LocalCluster(tmp_path, coordinator_in_broker=True, coordinators=1, database_url=DB)
    assert cli._counts(types.SimpleNamespace(brokers=3, coordinators=1,
                                             coordinator_in_broker=True)) == {
        "broker": 3, "coordinator": 0}


def test_overrides_apply_everywhere_then_per_kind_then_per_instance(tmp_path):
    cluster = LocalCluster(
        tmp_path, database_url=DB,
        env={"MAGNETAR_LEASE_TTL_MS": "2000", "MAGNETAR_LOG_LEVEL": "DEBUG"},
        service_env={"broker": {"MAGNETAR_LEASE_TTL_MS": "3000"},
                     "broker-1": {"MAGNETAR_LEASE_TTL_MS": "4000"}})
    assert cluster.env_for("admin")["MAGNETAR_LEASE_TTL_MS"] == "2000"
    assert cluster.env_for("broker-0")["MAGNETAR_LEASE_TTL_MS"] == "3000"
    assert cluster.env_for("broker-1")["MAGNETAR_LEASE_TTL_MS"] == "4000"
    assert cluster.env_for("broker-1")["MAGNETAR_LOG_LEVEL"] == "DEBUG"


def test_constructing_a_cluster_starts_and_creates_nothing(tmp_path):
    cluster = LocalCluster(tmp_path / "data", brokers=1, coordinators=0, admin=False,
                           registry=False)
    assert list(cluster.services) == ["broker-0"]
    assert not (tmp_path / "data").exists()
    assert not cluster.services["broker-0"].alive


def test_env_command_prints_every_service(capsys):
    assert cli.main(["env", "--brokers", "1"]) == 0
    out = capsys.readouterr().out
    assert "# broker-0\n" in out and "# broker-1\n" not in out and "# admin\n" in out
    assert "MAGNETAR_BROKER_ID=broker-0" in out and "MAGNETAR_PORT=8081" in out


def test_env_option_accepts_only_magnetar_settings():
    assert cli._parse_env(["MAGNETAR_LOG_LEVEL=DEBUG", "MAGNETAR_X=a=b"]) == {
        "MAGNETAR_LOG_LEVEL": "DEBUG", "MAGNETAR_X": "a=b"}
    with pytest.raises(SystemExit):
        cli._parse_env(["PATH=/bin"])
    with pytest.raises(SystemExit):
        cli._parse_env(["MAGNETAR_LOG_LEVEL"])


def test_banner_names_every_address_a_newcomer_needs(tmp_path):
    cluster = LocalCluster(tmp_path, ports=fixed_ports({}), database_url=DB)
    for pid, svc in enumerate(cluster.services.values(), start=100):
        svc.process = types.SimpleNamespace(pid=pid)  # banner() reads only the pid
    text = cli.banner(cluster)
    assert "service URL (clients)  http://127.0.0.1:8080" in text
    assert "admin URL              http://127.0.0.1:8081" in text
    assert f"PostgreSQL             {DB}" in text
    assert f"{tmp_path}/logs/<service>.log" in text
    assert "coordinator-0    http://127.0.0.1:8090" in text and "pid 102" in text
    assert "Ctrl-C stops everything" in text


def test_free_ports_avoid_the_ephemeral_range_and_never_repeat():
    from magnetar_runtime.local.postgres import _ephemeral_low, free_port

    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    if _ephemeral_low() > 12000:  # where outgoing connections take their source ports
        assert max(ports) < _ephemeral_low()


def test_banner_never_shows_the_database_password(tmp_path):
    url = "postgresql://magnetar:s3cret-pw@db.example:5432/magnetar"
    cluster = LocalCluster(tmp_path, ports=fixed_ports({}), database_url=url)
    for pid, svc in enumerate(cluster.services.values(), start=100):
        svc.process = types.SimpleNamespace(pid=pid)
    text = cli.banner(cluster)
    assert "PostgreSQL             postgresql://magnetar:***@db.example:5432/magnetar" in text
    assert "s3cret-pw" not in text


def test_tls_gives_every_service_the_files_and_https_urls(tmp_path):
    """`magnetar-local run --tls`: a CA and certificate made once in <data>/tls, the
    MAGNETAR_TLS_* variables (the chart's names), https:// and pulsar+ssl:// URLs, and a
    banner telling clients which CA to trust."""
    cluster = LocalCluster(tmp_path, ports=fixed_ports({}), database_url=DB, mutual_tls=True)
    ca = (tmp_path / "tls" / "ca.crt").read_bytes()
    assert LocalCluster(tmp_path, database_url=DB, tls=True).tls_files.ca_file.read_bytes() == ca  # kept
    for name, _svc in cluster.services.items():
        env = cluster.env_for(name)
        assert env["MAGNETAR_TLS_ENABLED"] == "true" and env["MAGNETAR_TLS_REQUIRE_CLIENT_CERT"] == "true"
        assert env["MAGNETAR_TLS_CA_FILE"] == str(tmp_path / "tls" / "ca.crt")
        assert env["MAGNETAR_ADVERTISED_URL"].startswith("https://")
    assert cluster.pulsar_service_url == "pulsar+ssl://127.0.0.1:6650"
    for pid, svc in enumerate(cluster.services.values(), start=100):
        svc.process = types.SimpleNamespace(pid=pid)
    text = cli.banner(cluster)
    assert f"TLS CA (trust it)      {tmp_path / 'tls' / 'ca.crt'}" in text
    assert f"--tls-trust-cert-path {tmp_path / 'tls' / 'ca.crt'} --tls-cert-file" in text
    assert f"curl -s --cacert {tmp_path / 'tls' / 'ca.crt'} --cert" in text
    assert "MAGNETAR_TLS_ENABLED" not in LocalCluster(tmp_path / "plain", database_url=DB).env_for("broker-0")
