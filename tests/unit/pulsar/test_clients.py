from magnetar_protocol.pulsar.clients import understands_end_of_topic


def test_cpp_based_clients_are_not_told_the_end_of_topic():
    # The pulsar-client wheel 3.13 announces its C++ core.
    assert not understands_end_of_topic("Pulsar-CPP-v4.2.0")
    assert not understands_end_of_topic(" pulsar-cpp-v3.1.0")


def test_other_clients_are_told():
    for version in ("Pulsar-Java-v4.0.1", "Pulsar Go 0.14.0", "pulsar-wire-test", ""):
        assert understands_end_of_topic(version)
