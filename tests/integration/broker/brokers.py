"""Two broker stores ("a" and "b") on one pool and one topic: the setting of the tests
that check what a broker may write with or without the topic's lease."""

from magnetar_broker.rows import EntryColumns
from magnetar_broker.store import BrokerStore
from magnetar_storage.db import create_pool


def one_entry(entry_id: int, producer: str = "p", seq: int = 0):
    """append_entries' columns and sequences for one single-message batch."""
    columns = EntryColumns([entry_id], [producer], [seq], [seq], [1], [0], [b"x"])
    return columns, {producer: seq}


async def two_brokers(database_url, topic: str = "persistent://public/default/f"):
    """(pool, broker a, broker b, topic id): both registered, the topic unowned."""
    pool = await create_pool(database_url, max_size=4)
    a, b = BrokerStore(pool, "a"), BrokerStore(pool, "b")
    await a.register("http://a")
    await b.register("http://b")
    topic_id = await a.create_topic(topic, "public", "default", -1)
    return pool, a, b, topic_id
