"""Pulsar's binary protocol in the broker (docs/pulsar-protocol.md): ``server`` accepts
connections, ``connection`` frames, connects and routes, and one module per role maps
commands onto the broker's service layer: ``discovery``, ``producers``, ``consumers``."""
