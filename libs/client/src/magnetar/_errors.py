"""Client-side failures that never cross the wire, in the one hierarchy of
``magnetar_protocol.errors`` (as ConnectError and Timeout are)."""

from __future__ import annotations

from magnetar_protocol.errors import MagnetarError


class ProducerQueueIsFull(MagnetarError):
    """``max_pending_messages`` are pending and the producer was made with
    ``block_if_queue_full=False`` (or blocking would deadlock the client's own thread)."""


class AlreadyClosed(MagnetarError):
    """The producer, consumer, reader or client was closed."""
