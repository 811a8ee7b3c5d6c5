"""What a Pulsar client can take, told by its CONNECT's ``client_version``.  Pure.

A SEND_ERROR fails just that message only with one code, which differs by client: the
C++ client fails it on ChecksumError (``removeCorruptMessage``) and closes the connection
on any other code, then resends everything pending, the refused message too, forever; the
Java client fails it on NotAllowedError (``recoverNotAllowedError``) and resends it on
ChecksumError once it finds its checksum intact.  So a message the broker refuses for its
content (schema validation) is answered with the code its client gives up on.

The C++ client (and so the Python, Node and C# wheels built on it, which announce
themselves as ``Pulsar-CPP-v...``) has no handler for REACHED_END_OF_TOPIC: it logs
"Received invalid message from server" and closes the connection, then reconnects and
gets its unacknowledged messages again.  So only other clients (Java ``Pulsar-Java-v...``,
Go, ...) are told; a C++ client's receive just waits at the end, as it would against a
Pulsar broker that did not close it."""

from __future__ import annotations

from magnetar_protocol import pulsar_api_pb2 as pb

CPP_PREFIX = "pulsar-cpp-"


def understands_end_of_topic(client_version: str) -> bool:
    """Whether REACHED_END_OF_TOPIC may be pushed to this client."""
    return not _is_cpp(client_version)


def one_message_refusal(client_version: str) -> int:
    """The SEND_ERROR code with which this client fails one message and goes on."""
    return pb.ChecksumError if _is_cpp(client_version) else pb.NotAllowedError


def _is_cpp(client_version: str) -> bool:
    return client_version.strip().lower().startswith(CPP_PREFIX)
