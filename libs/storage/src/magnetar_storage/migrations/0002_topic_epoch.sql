-- PIP-68 topic epoch: grows each time a new exclusive producer takes a partition over.
-- It lives on the lease row so that the append statement checks lease epoch and topic
-- epoch under the same row lock.
ALTER TABLE topic_owners ADD COLUMN topic_epoch bigint NOT NULL DEFAULT 0;
