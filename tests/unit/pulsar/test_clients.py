from magnetar_protocol.pulsar.clients import understands_end_of_topic


def test_cpp_based_clients_are_not_told_the_end_of_topic():
    # The pulsar-client wheel 3.13 announces its C++ core.
    assert not understands_end_of_topic("Pulsar-CPP-v4.2.0")
    assert not understands_end_of_topic(" pulsar-cpp-v3.1.0")


def test_other_clients_are_told():
    for version in ("Pulsar-Java-v4.0.1", "Pulsar Go 0.14.0", "pulsar-wire-test", ""):
        assert understands_end_of_topic(version)


def test_a_single_message_is_refused_with_the_code_its_client_fails_it_on():
    from magnetar_protocol import pulsar_api_pb2 as pb
    from magnetar_protocol.pulsar.clients import one_message_refusal

    # C++ (the wheel): ChecksumError fails the message, anything else reconnects and resends.
    assert one_message_refusal("Pulsar-CPP-v4.2.0") == pb.ChecksumError
    # Java: NotAllowedError fails the message, ChecksumError resends it.
    assert one_message_refusal("Pulsar-Java-v4.0.1") == pb.NotAllowedError
