"""What a Pulsar client can take, told by its CONNECT's ``client_version``.  Pure.

The C++ client (and so the Python, Node and C# wheels built on it, which announce
themselves as ``Pulsar-CPP-v...``) has no handler for REACHED_END_OF_TOPIC: it logs
"Received invalid message from server" and closes the connection, then reconnects and
gets its unacknowledged messages again.  So only other clients (Java ``Pulsar-Java-v...``,
Go, ...) are told; a C++ client's receive just waits at the end, as it would against a
Pulsar broker that did not close it."""

from __future__ import annotations

CPP_PREFIX = "pulsar-cpp-"


def understands_end_of_topic(client_version: str) -> bool:
    """Whether REACHED_END_OF_TOPIC may be pushed to this client."""
    return not client_version.strip().lower().startswith(CPP_PREFIX)
