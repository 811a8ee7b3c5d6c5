-- Delayed delivery (docs/client.md and docs/operations.md, "Delayed delivery").
--
-- entries.deliver_at: the latest delivery time (ms since the epoch) of the entry's
-- messages, as its producer said; NULL when none is delayed.  Each message carries its
-- own time in its batch; this lets a subscription know which entries to look into
-- without unpacking every batch.  NULL costs nothing on the hot path.
ALTER TABLE entries ADD COLUMN deliver_at bigint;

-- The delayed messages a Shared or Key_Shared subscription has passed and not yet
-- delivered: its cursor moves past them (so a million of them do not hold its
-- mark-delete position back, nor grow its individual acks), and they are found again
-- by time through the primary key, never by rescanning the log.  Written with the
-- cursor that passes them, deleted with the cursor that acknowledges them.  `indices`:
-- the messages of the entry still to deliver (a little-endian bitset; empty: all);
-- `messages`: how many.
CREATE TABLE delayed_deliveries (
    topic_id     bigint NOT NULL,
    subscription text   NOT NULL,
    deliver_at   bigint NOT NULL,
    entry_id     bigint NOT NULL,
    indices      bytea  NOT NULL DEFAULT '\x',
    messages     integer NOT NULL CHECK (messages > 0),
    PRIMARY KEY (topic_id, subscription, deliver_at, entry_id)
);
-- Trimming keeps every entry a delayed message is waiting in (the lowest one per topic).
CREATE INDEX delayed_deliveries_entry ON delayed_deliveries (topic_id, entry_id);

-- Pulsar's delayed_delivery policy, per namespace and per topic: active (false: delayed
-- messages are delivered at once), the tick (how late a delayed message may be), and
-- the longest delay a producer may ask for (0: no limit).  NULL: not set at this level.
ALTER TABLE storage_policies
    ADD COLUMN delayed_delivery_active boolean,
    ADD COLUMN delayed_delivery_tick_ms bigint CHECK (delayed_delivery_tick_ms > 0),
    ADD COLUMN delayed_delivery_max_delay_ms bigint CHECK (delayed_delivery_max_delay_ms >= 0);
