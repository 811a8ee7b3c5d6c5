"""A subscription of a partition: the subscription and its consumers
(subscription.py), the cursor (cursor.py), dispatch to consumers (dispatch.py), and
transactional acks (txnacks.py: the pending acks a subscription holds, composed into
it; their rules in pendingack.py).  Builds on the partition package."""
