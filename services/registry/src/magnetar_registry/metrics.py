"""Registry metrics, named as seed 000 names them, plus connect/fence counters."""

from prometheus_client import Counter, Gauge, Histogram, Summary

KEY_COUNT = Gauge("pulsar_txn_transaction_key_count", "Transaction keys in use (not deleted)")
KEY_EPOCH = Gauge("pulsar_txn_transaction_key_epoch",
                  "Latest epoch of a transaction key (the most recently active keys, capped by "
                  "MAGNETAR_METRICS_MAX_LABELLED_KEYS)", ["transaction_key"])
KEY_AGE = Summary("pulsar_txn_transaction_key_age",
                  "Seconds since a transaction key was last active, observed per key at each "
                  "refresh (finds unused keys); labelled keys capped as for the epoch",
                  ["transaction_key"])
CONNECTS = Counter("magnetar_txn_key_connects", "Key connects", ["outcome"])
FENCES = Counter("magnetar_txn_key_fenced_transactions",
                 "Transactions aborted because a newer connection fenced their key")
FENCE_LATENCY = Histogram(
    "magnetar_txn_key_fence_seconds", "New connection to the previous holder's transactions aborted",
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5, 30),
)
