"""A partition this broker owns: the log's I/O shell (log.py), the pure write planner
(planner.py), the transaction buffer (txnbuffer.py, its state and rules in txnrules.py),
deduplication (dedup.py), producer access modes (access.py) and batch checks
(batchcheck.py).  Imports nothing of the subscription package."""
