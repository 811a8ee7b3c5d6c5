-- Terminated topics (Pulsar's `topics terminate`): no more sends are accepted, and
-- consumers that have read everything see the end of the topic.  Kept on the lease row,
-- which every write already reads in the statement that checks the owner's epoch, and
-- written by the owning broker under that same check.  NULL: not terminated; else the
-- id of the last entry when it was terminated (-1 for an empty log).
ALTER TABLE topic_owners ADD COLUMN terminated_entry bigint;
