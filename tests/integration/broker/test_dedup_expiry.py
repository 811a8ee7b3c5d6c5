"""Idle producer names lose their deduplication state (Pulsar's
brokerDeduplicationProducerInactivityTimeoutMinutes): only names idle long enough, only
names not connected, and only while the broker holds the lease."""

from tests.integration.broker.brokers import one_entry, two_brokers


async def test_idle_disconnected_names_are_forgotten_while_the_lease_is_held(database_url):
    pool, a, b, topic_id = await two_brokers(database_url)
    epoch = await a.assign_owner(topic_id, "a", 0)
    for i, name in enumerate(["idle", "idle-but-connected", "recent"]):
        assert await a.append_entries(topic_id, epoch, *one_entry(i, name, 5)) == (True, True)
    await pool.execute("UPDATE producer_sequences SET updated_at = now() - interval '2 hours' "
                       "WHERE producer_name <> 'recent'")

    # Another broker without the lease deletes nothing.
    assert await b.expire_idle_producers(topic_id, epoch, 3600, []) == []
    assert await a.expire_idle_producers(topic_id, epoch, 3600, ["idle-but-connected"]) == ["idle"]
    assert await a.last_sequence_id(topic_id, "idle") == -1  # a new producer starts afresh
    assert await a.last_sequence_id(topic_id, "idle-but-connected") == 5
    assert await a.last_sequence_id(topic_id, "recent") == 5
    # After a takeover the former owner's epoch deletes nothing either.
    new_epoch = await b.assign_owner(topic_id, "b", epoch)
    assert await a.expire_idle_producers(topic_id, epoch, 3600, []) == []
    assert await b.expire_idle_producers(topic_id, new_epoch, 3600, []) == ["idle-but-connected"]
    await pool.close()
