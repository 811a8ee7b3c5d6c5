"""Issue 24 finding 1: TLS on every hop, against one real local Magnetar run the way
`magnetar-local run --mutual-tls` runs it: a CA made in the test (local/certs.py,
``cryptography``), HTTPS on every service port, pulsar+ssl:// on the Pulsar ports,
service-to-service calls verifying the CA and presenting the service's certificate,
PostgreSQL with sslmode=verify-full, every service requiring a client certificate.

One cluster for the module (with its own PostgreSQL, which offers TLS); the last test
rotates the certificate on disk and sees new connections get the new one, which the
earlier tests' CA still verifies."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

import magnetar
from magnetar_protocol.tlsctx import client_context
from magnetar_runtime.local.certs import issue, make_ca
from magnetar_runtime.local.cluster import LocalCluster, LocalTls
from tests.e2e.conftest import TEST_ENV
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

RELOAD_S = 0.5


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("tls-cluster"), brokers=2, registry=False,
                           durable=False, mutual_tls=True,
                           env=TEST_ENV | {"MAGNETAR_TLS_RELOAD_INTERVAL_S": str(RELOAD_S)})
    cluster.start()
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """A CA the cluster does not trust, and a certificate it signed for the same names."""
    directory = tmp_path_factory.mktemp("other-ca")
    return issue(make_ca(directory, "Some other CA"), directory, "impostor")


def _files(cluster: LocalCluster) -> LocalTls:
    return cluster.tls_files


def _client(cluster: LocalCluster, **options) -> magnetar.Client:
    f = _files(cluster)
    options = {"tls_trust_certs_file_path": str(f.ca_file), "tls_certificate_file_path": str(f.cert_file),
               "tls_private_key_file_path": str(f.key_file), "operation_timeout_seconds": 15} | options
    return magnetar.Client(",".join(cluster.broker_urls), **options)


def _pulsar(cluster: LocalCluster, **options) -> pulsar.Client:
    f = _files(cluster)
    options = {"tls_trust_certs_file_path": str(f.ca_file), "tls_validate_hostname": True,
               "tls_certificate_file_path": str(f.cert_file), "tls_private_key_file_path": str(f.key_file),
               "operation_timeout_seconds": 15, "connection_timeout_ms": 5000} | options
    return pulsar.Client(cluster.pulsar_service_url, logger=logging.getLogger("pulsar-client"), **options)


def test_every_url_is_tls(tls_cluster):
    assert all(url.startswith("https://") for url in tls_cluster.broker_urls + [tls_cluster.admin_url]
               + tls_cluster.coordinator_urls)
    assert all(url.startswith("pulsar+ssl://") for url in tls_cluster.pulsar_urls)


def test_the_magnetar_client_over_https(tls_cluster):
    with _client(tls_cluster) as client:
        producer = client.create_producer("tls-client")
        consumer = client.subscribe("tls-client", "s", initial_position=magnetar.InitialPosition.Earliest)
        with client.new_transaction() as txn:  # client -> coordinator -> brokers, all TLS
            producer.send(b"in a transaction", txn=txn)
        producer.send(b"plain")
        got = sorted(consumer.receive(10000).data() for _ in range(2))
        assert got == [b"in a transaction", b"plain"]


def test_the_pulsar_wheel_over_pulsar_ssl(tls_cluster):
    """With tls_trust_certs_file_path and tls_validate_hostname, on topics owned by
    either broker: a lookup answers the owner's pulsar+ssl:// URL."""
    client = _pulsar(tls_cluster)
    try:
        for i in range(4):
            topic = f"persistent://public/default/tls-wheel-{i}"
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            client.create_producer(topic).send(b"over pulsar+ssl %d" % i)
            assert consumer.receive(10000).data() == b"over pulsar+ssl %d" % i
        owners = {tls_cluster.owner_of(f"persistent://public/default/tls-wheel-{i}") for i in range(4)}
        assert len(owners) == 2, owners  # both brokers' listeners were reached
    finally:
        client.close()


def test_magnetar_admin_over_https(tls_cluster):
    f = _files(tls_cluster)
    cli = [str(Path(sys.executable).parent / "magnetar-admin"), "--admin-url", tls_cluster.admin_url]
    mutual = ["--tls-cert-file", str(f.cert_file), "--tls-key-file", str(f.key_file)]
    ok = subprocess.run([*cli, "--tls-trust-cert-path", str(f.ca_file), *mutual, "-o", "json",
                         "tenants", "list"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "public" in ok.stdout, ok.stderr
    # Without the CA the admin service's certificate is not trusted: exit 3, and why.
    untrusted = subprocess.run([*cli, *mutual, "tenants", "list"], capture_output=True, text=True, timeout=60)
    assert untrusted.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr, untrusted.stderr


def test_the_charts_helm_test_script_passes_over_tls(tls_cluster):
    """charts/magnetar/files/helm_test.py with the MAGNETAR_TLS_* files the chart mounts."""
    from tests.e2e.test_helm_test_script import run_helm_test

    done = run_helm_test(tls_cluster, **_files(tls_cluster).env(True))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_probe_command_reaches_its_pod_under_mutual_tls(tls_cluster):
    """The chart's probes under mutual TLS (the kubelet has no client certificate)."""
    import os

    probe = str(Path(sys.executable).parent / "magnetar-probe")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MAGNETAR_")}
    env = clean | _files(tls_cluster).env(True) | {"MAGNETAR_PORT": str(tls_cluster.services["broker-0"].port)}
    assert subprocess.run([probe, "/readyz"], env=env, timeout=60).returncode == 0
    no_cert = {k: v for k, v in env.items() if k not in ("MAGNETAR_TLS_CERT_FILE", "MAGNETAR_TLS_KEY_FILE")}
    refused = subprocess.run([probe, "/readyz"], env=no_cert, timeout=60, capture_output=True, text=True)
    assert refused.returncode == 1 and "magnetar-probe" in refused.stderr


def test_postgres_is_reached_over_verified_tls(tls_cluster):
    assert "sslmode=verify-full" in tls_cluster.database_url
    rows = tls_cluster.query(
        "SELECT a.application_name, s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
        "WHERE a.datname = current_database()")
    assert len(rows) > 3 and all(r["ssl"] for r in rows), rows  # every service's pool


def _handshake(url: str, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    host, port = url.split("://")[1].rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10)
    return ctx.wrap_socket(raw, server_hostname=host)


def _refused(url: str, ctx: ssl.SSLContext) -> str:
    """The error of a handshake (and first read: TLS 1.3 sends the server's refusal of a
    client certificate after the client's handshake is done)."""
    try:
        sock = _handshake(url, ctx)
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            data = sock.recv(100)
            return "" if data else "closed"
        finally:
            sock.close()
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("port", ["broker http", "broker pulsar", "coordinator", "admin"])
def test_plaintext_is_refused_on_a_tls_port(tls_cluster, port):
    url = {"broker http": tls_cluster.broker_urls[0], "broker pulsar": tls_cluster.pulsar_urls[0],
           "coordinator": tls_cluster.coordinator_urls[0], "admin": tls_cluster.admin_url}[port]
    host, port_no = url.split("://")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port_no)), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        try:
            while chunk := sock.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    assert b"HTTP/1.1 200" not in answer and b"ok" not in answer, answer[:200]


def test_plaintext_clients_are_refused(tls_cluster):
    plain = tls_cluster.broker_urls[0].replace("https://", "http://")
    with magnetar.Client(plain, operation_timeout_seconds=2) as client:
        with pytest.raises((magnetar.ConnectError, magnetar.Timeout)):
            client.create_producer("tls-plain")
    wheel = pulsar.Client(tls_cluster.pulsar_service_url.replace("pulsar+ssl://", "pulsar://"),
                          operation_timeout_seconds=2, logger=logging.getLogger("pulsar-client"))
    try:
        with pytest.raises(pulsar.PulsarException):
            wheel.create_producer("persistent://public/default/tls-plain")
    finally:
        wheel.close()


def test_a_peer_with_a_wrong_certificate_is_refused(tls_cluster, other_ca, tmp_path):
    """Mutual TLS: a client certificate the cluster's CA did not sign, none at all, or
    one that expired, is refused on the HTTP and the Pulsar ports; the cluster's own
    certificate passes.  And a client refuses a server whose certificate the CA did not
    sign."""
    f = _files(tls_cluster)
    ca = str(f.ca_file)
    urls = [tls_cluster.broker_urls[0], tls_cluster.pulsar_urls[0], tls_cluster.coordinator_urls[0]]
    good = client_context(ca, str(f.cert_file), str(f.key_file))
    for url in urls:
        assert _refused(url, good) == "", url
    expired = issue(_local_ca(f), tmp_path, "expired",
                    valid_from=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=10), valid_days=1)
    for name, ctx in (("another CA's", client_context(ca, str(other_ca.cert_file), str(other_ca.key_file))),
                      ("no", client_context(ca)),
                      ("an expired", client_context(ca, str(expired.cert_file), str(expired.key_file)))):
        for url in urls:
            assert _refused(url, ctx) != "", f"{url} accepted {name} client certificate"
    # The wheel with another CA's certificate, or none: refused, not served.
    for options in ({"tls_certificate_file_path": str(other_ca.cert_file),
                     "tls_private_key_file_path": str(other_ca.key_file)},
                    {"tls_certificate_file_path": "", "tls_private_key_file_path": ""}):
        wheel = _pulsar(tls_cluster, operation_timeout_seconds=3, **options)
        try:
            with pytest.raises(pulsar.PulsarException):
                wheel.create_producer("persistent://public/default/tls-impostor")
        finally:
            wheel.close()
    # The other way round: a server whose certificate the CA did not sign.
    with _impostor_server(other_ca) as port:
        with magnetar.Client(f"https://127.0.0.1:{port}", tls_trust_certs_file_path=ca,
                             operation_timeout_seconds=3) as client:
            with pytest.raises(magnetar.TlsError, match="CERTIFICATE_VERIFY_FAILED"):
                client.create_producer("tls-impostor")
        # A service's own calls (magnetar_runtime.rpc, with the process's TLS context as
        # serve() sets it up) refuse it too, and still reach a real peer.
        refused = asyncio.run(_rpc_lookup(f, f"https://127.0.0.1:{port}"))
        assert refused.startswith("ConnectError") and "CERTIFICATE_VERIFY_FAILED" in refused, refused
    assert asyncio.run(_rpc_lookup(f, tls_cluster.broker_urls[0])) == "ok"


async def _rpc_lookup(files: LocalTls, url: str) -> str:
    from magnetar_protocol import magnetar_pb2 as pb
    from magnetar_protocol.errors import MagnetarError
    from magnetar_runtime import tls
    from magnetar_runtime.rpc import RpcClient

    tls.configure(tls.TlsFiles(str(files.cert_file), str(files.key_file), str(files.ca_file)))
    rpc = RpcClient(5)
    try:
        await rpc.call(url, "/v1/topics/metadata", pb.PartitionMetadataRequest(topic="tls-rpc"),
                       pb.PartitionMetadataResponse)
        return "ok"
    except MagnetarError as exc:
        return f"{type(exc).__name__}: {exc.message}"
    finally:
        await rpc.close()
        tls.configure(None)


def _local_ca(files: LocalTls):
    from magnetar_runtime.local.certs import Ca

    return Ca(files.ca_file, files.ca_file.with_name("ca.key"))


class _impostor_server:
    """A TLS listener presenting ``issued``'s certificate (it answers nothing)."""

    def __init__(self, issued) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(issued.cert_file, issued.key_file)
        self.sock = socket.create_server(("127.0.0.1", 0))

    def __enter__(self) -> int:
        import threading

        def serve():
            while True:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                try:
                    self.ctx.wrap_socket(conn, server_side=True).close()
                except (ssl.SSLError, OSError):
                    conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


def test_a_renewed_certificate_is_served_without_a_restart(tls_cluster, tmp_path):
    """cert-manager renews by rewriting the Secret's files: within the reload interval,
    new connections to every port get the new certificate; no process restarted."""
    f = _files(tls_cluster)
    ctx = client_context(str(f.ca_file), str(f.cert_file), str(f.key_file))
    urls = [tls_cluster.broker_urls[0], tls_cluster.pulsar_urls[0], tls_cluster.admin_url]

    def serial(url: str) -> int:
        sock = _handshake(url, ctx)
        try:
            from cryptography import x509

            return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number
        finally:
            sock.close()

    pids = {name: svc.pid for name, svc in tls_cluster.services.items()}
    before = {url: serial(url) for url in urls}
    renewed = issue(_local_ca(f), tmp_path, "renewed")
    # Written in place, as a Secret volume's update is seen by the process.
    f.key_file.write_bytes(renewed.key_file.read_bytes())
    f.cert_file.write_bytes(renewed.cert_file.read_bytes())
    from cryptography import x509

    new_serial = x509.load_pem_x509_certificate(renewed.cert_file.read_bytes()).serial_number
    for url in urls:
        wait_until(lambda url=url: serial(url) == new_serial, 30,
                   f"{url} serving the renewed certificate (was serial {before[url]})")
    assert {name: svc.pid for name, svc in tls_cluster.services.items()} == pids
    with _client(tls_cluster) as client:  # and the cluster still works end to end
        client.create_producer("tls-after-renewal").send(b"still fine")
