"""The Magnetar broker: serves the topic partitions it has leased (produce, dispatch,
acks, deduplication).  Pure rules live in dedup.py, cursor.py and dispatch.py."""
