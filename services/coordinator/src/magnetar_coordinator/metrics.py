"""Coordinator metrics, named as Pulsar's transaction coordinator names them."""

from prometheus_client import Counter, Gauge, Histogram

ACTIVE = Gauge("pulsar_txn_active_count", "Transactions not yet ended")
CREATED = Counter("pulsar_txn_created", "Transactions created")
COMMITTED = Counter("pulsar_txn_committed", "Transactions committed")
ABORTED = Counter("pulsar_txn_aborted", "Transactions aborted")
TIMEOUTS = Counter("pulsar_txn_timeout", "Transactions aborted by timeout")
APPEND_LOG = Counter("pulsar_txn_append_log", "Writes to the transaction log")
EXECUTION_LATENCY = Histogram(
    "pulsar_txn_execution_latency_seconds", "EndTxn request to every participant done",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
ADOPTIONS = Counter("magnetar_txn_coordinator_adoptions",
                    "Coordinator ids of gone processes this process adopted")
ONE_PHASE = Counter("magnetar_txn_one_phase",
                    "Transactions ended in one SQL transaction by the broker hosting their "
                    "coordinator (the rest take the two-phase path)")
LIMITED = Counter("magnetar_txn_refused_by_role_limits",
                  "New transactions refused by a per-role limit (open, or per second)")
EARLIER_COMMITS_ENDED = Counter(
    "magnetar_txn_app_earlier_commits_ended",
    "Earlier application commits this coordinator ended on a shared partition before an "
    "application commit's own markers (their own coordinator had not yet: commit order)")
