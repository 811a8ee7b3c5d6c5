-- Coordinator adoption (docs/transactions.md, "A coordinator that disappears"): a live
-- coordinator takes the row of a TCID whose process is gone (heartbeat older than the
-- lease TTL) with the same fence-epoch compare-and-set a restart uses, and serves its
-- transactions until the TCID's own process comes back and claims it again.
-- adopted_by: the adopter's own TCID while an adopter holds the row; NULL while the
-- TCID's own process does (the owner's claim wins over an adopter at once).
ALTER TABLE coordinators ADD COLUMN adopted_by integer;
