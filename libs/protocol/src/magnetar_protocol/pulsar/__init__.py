"""Pulsar's binary protocol, the pure wire layer: frames (framing, checksums, an
incremental decoder), compression (the four codecs) and batches (a Pulsar entry to and
from Magnetar's MessageBatch).  The listener that maps commands onto the broker's service
layer builds on these; see docs/pulsar-protocol.md."""
