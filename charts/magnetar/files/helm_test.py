"""`helm test`: produce, consume and commit a transaction through the installed release.

Runs in the Magnetar image (the `magnetar` client and the services' auth rules are
there).  Every step prints a line; any failure prints what failed and exits 1, so
`helm test --logs` says which step broke.  Environment: MAGNETAR_SERVICE_URL (brokers)
and the release's MAGNETAR_AUTH_* and MAGNETAR_TLS_* settings, from which the token is made exactly as the
services make their own (a given service token, else one signed for the first superuser
role).
"""

import os
import sys
import uuid


def step(text: str) -> None:
    print(f"helm test: {text}", flush=True)


def main() -> int:
    import magnetar
    from magnetar_runtime.auth import Authenticator
    from magnetar_runtime.settings import ServiceSettings

    service_url = os.environ["MAGNETAR_SERVICE_URL"]
    token = Authenticator(ServiceSettings()).service_token or None
    topic = f"persistent://public/default/helm-test-{uuid.uuid4().hex[:12]}"
    payload = f"helm-test {uuid.uuid4()}".encode()
    step(f"connecting to {service_url} ({'with' if token else 'without'} a token), topic {topic}")
    # With TLS on, the release's CA verifies the brokers (and its certificate proves this
    # pod under mutual TLS): the MAGNETAR_TLS_* files the services get.
    tls = {}
    if os.environ.get("MAGNETAR_TLS_ENABLED") == "true":
        tls = {"tls_trust_certs_file_path": os.environ["MAGNETAR_TLS_CA_FILE"],
               "tls_certificate_file_path": os.environ["MAGNETAR_TLS_CERT_FILE"],
               "tls_private_key_file_path": os.environ["MAGNETAR_TLS_KEY_FILE"]}
    client = magnetar.Client(service_url, auth_token=token, **tls)
    try:
        consumer = client.subscribe(topic, "helm-test",
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        txn = client.new_transaction(timeout_ms=60000)
        step(f"transaction {txn.txn_id} open; sending in it")
        producer.send(payload, txn=txn)
        try:
            early = consumer.receive(timeout_millis=1000)
        except magnetar.Timeout:
            early = None
        if early is not None:
            raise AssertionError(f"a message of an open transaction was delivered: {early.data()!r}")
        txn.commit()
        step("committed; consuming")
        message = consumer.receive(timeout_millis=30000)
        if message.data() != payload:
            raise AssertionError(f"consumed {message.data()!r}, sent {payload!r}")
        ack_txn = client.new_transaction(timeout_ms=60000)
        consumer.acknowledge(message, txn=ack_txn)
        ack_txn.commit()
        step(f"consumed {message.message_id()} and committed its acknowledgement")
        producer.close()
        consumer.close()
    finally:
        client.close()
    step("passed: produce, consume and commit through the release work")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 - any failure is the test's answer
        print(f"helm test: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
