"""``transactions ...``: coordinators, transactions, buffers, pending acks (the
/admin/v3/transactions paths of Pulsar) and transaction keys (/admin/v2/transactions/
transaction-keys, seed 000)."""

from __future__ import annotations

from magnetar.admin_cli._http import BadAnswer, UsageError, q
from magnetar.admin_cli._names import duration_ms, name, topic, topic_tail, transaction_key, txn_part
from magnetar.admin_cli._output import key_values, table, timestamp

V3 = "/admin/v3/transactions"
KEYS = "/admin/v2/transactions/transaction-keys"


def _txn(a) -> tuple[int, int]:
    return txn_part("most-sig-bits", a.most_sig_bits), txn_part("least-sig-bits", a.least_sig_bits)


def group_transactions(add) -> None:
    def coordinator_stats(api, out, a) -> None:
        data = api.request("GET", f"{V3}/coordinatorStats", query={"coordinatorId": a.coordinator_id})
        out.emit(data, lambda d: table(
            ["COORDINATOR", "STATE", "ONGOING", "COMMITTED", "ABORTED", "LOW WATER MARK", "URL"],
            [[cid, s.get("state"), s.get("ongoingTxnSize"), s.get("committedTxnCount"),
              s.get("abortedTxnCount"), s.get("lowWaterMark"), s.get("url")] for cid, s in d.items()]))

    def metadata(api, out, a) -> None:
        most, least = _txn(a)
        out.emit(api.request("GET", f"{V3}/transactionMetadata/{most}/{least}"), render_metadata)

    def slow(api, out, a) -> None:
        ms = duration_ms(a.time)
        data = api.request("GET", f"{V3}/slowTransactions/{ms}", query={"coordinatorId": a.coordinator_id})
        out.emit(data, lambda d: table(
            ["TXN", "STATUS", "OPENED", "TIMEOUT MS", "OWNER", "PARTITIONS", "SUBSCRIPTIONS"],
            [[txn, m.get("status"), timestamp(m.get("openTimestamp")), m.get("timeoutAt"), m.get("owner"),
              len(m.get("producedPartitions", {})),
              sum(len(subs) for subs in m.get("ackedPartitions", {}).values())] for txn, m in d.items()]))

    def abort(api, out, a) -> None:
        most, least = _txn(a)
        api.request("POST", f"{V3}/abortTransaction/{most}/{least}")
        out.done(f"Aborted transaction ({most},{least})", txnId=f"({most},{least})")

    def buffer_stats(api, out, a) -> None:
        t = topic(a.topic)
        data = api.request("GET", f"{V3}/transactionBufferStats/{topic_tail(t)}")
        out.emit(data, lambda d: (print(f"Transaction buffer of {t.full}"), key_values(d)))

    def pending_ack_stats(api, out, a) -> None:
        t = topic(a.topic)
        sub = name("subscription", a.subscription)
        data = api.request("GET", f"{V3}/pendingAckStats/{topic_tail(t)}/{q(sub)}")
        out.emit(data, lambda d: (
            print(f"Pending acks of subscription {sub} on {t.full}: {d.get('ongoingTxnSize')} transaction(s)"),
            table(["TXN", "PENDING ACK POSITIONS", "CUMULATIVE"],
                  [[txn, v.get("pendingAckPositions"), v.get("cumulative")]
                   for txn, v in d.get("ongoingTxns", {}).items()])))

    def list_keys(api, out, a) -> None:
        if a.page_size is not None and a.page_size < 1:
            raise UsageError(f"--page-size must be at least 1 (got {a.page_size})")
        keys, token, seen = [], None, set()
        while True:  # every page: the command answers for the whole registry
            page = api.request("GET", KEYS, query={"owner": a.owner, "pageSize": a.page_size,
                                                   "pageToken": token})
            keys.extend(page.get("transactionKeys", []))
            token = page.get("nextPageToken")
            if not token:
                break
            if token in seen:  # a server bug must not make a script loop for ever
                raise BadAnswer(f"GET {KEYS} handed out page token {token!r} twice")
            seen.add(token)
        out.emit({"transactionKeys": keys, "nextPageToken": None}, lambda d: render_keys(d["transactionKeys"]))

    def get_key(api, out, a) -> None:
        key = transaction_key(a.key)
        data = api.request("GET", f"{KEYS}/{q(key)}", query={"owner": a.owner})
        out.emit(data, render_key)

    def delete_key(api, out, a) -> None:
        key = transaction_key(a.key)
        answer = api.request("DELETE", f"{KEYS}/{q(key)}", query={"owner": a.owner}) or {}
        aborted = answer.get("abortedTransactions") or []
        out.done(f"Deleted transaction key {key!r} of owner {answer.get('owner')!r}; "
                 + (f"aborted its transactions {' '.join(aborted)}" if aborted else "it had no open transaction"),
                 **answer)

    def txn_options(p) -> None:
        p.add_argument("--most-sig-bits", "-m", type=int, required=True,
                       help="most significant bits of the transaction id (the coordinator id)")
        p.add_argument("--least-sig-bits", "-l", type=int, required=True,
                       help="least significant bits of the transaction id")

    def coordinator_option(p) -> None:
        p.add_argument("--coordinator-id", "-c", type=int, help="only this coordinator")

    coordinator_option(add("coordinator-stats", coordinator_stats, "stats of every transaction coordinator"))
    txn_options(add("transaction-metadata", metadata, "one transaction's status and participants"))
    p = add("slow-transactions", slow, "transactions open longer than --time")
    p.add_argument("--time", "-t", required=True, help="a duration: 500ms, 10s, 1m, 2h, 1d")
    coordinator_option(p)
    txn_options(add("abort-transaction", abort, "abort a transaction now"))
    p = add("transaction-buffer-stats", buffer_stats, "a topic partition's transaction buffer")
    p.add_argument("--topic", "-t", required=True, help="a topic, or one partition of a partitioned topic")
    p = add("pending-ack-stats", pending_ack_stats, "transactional acks pending on a subscription")
    p.add_argument("--topic", "-t", required=True, help="a topic, or one partition of a partitioned topic")
    p.add_argument("--sub-name", "-s", dest="subscription", required=True, help="the subscription")
    p = add("list-transaction-keys", list_keys, "transaction keys: owner, epoch, coordinator, transactions")
    p.add_argument("--owner", help="only this owner's keys (the role of the clients that use them)")
    p.add_argument("--page-size", type=int, help="keys per request (every page is fetched)")
    for cmd, fn, text in (("get-transaction-key", get_key, "one transaction key: epoch and transactions"),
                          ("delete-transaction-key", delete_key,
                           "abort a transaction key's transactions and remove the key")):
        p = add(cmd, fn, text)
        p.add_argument("key", metavar="KEY", help="the key as the client gave it ('/', spaces, unicode work)")
        p.add_argument("--owner", help="the key's owner (default: the role of --auth-token)")


def render_metadata(m: dict) -> None:
    view = dict(m)
    for k in ("openTimestamp", "deadline", "endTimestamp"):
        if k in view:
            view[k] = timestamp(view[k])
    key_values(view, ["txnId", "status", "owner", "openTimestamp", "timeoutAt", "deadline", "endTimestamp",
                      "timedOut"])
    print("\nProduced partitions")
    table(["PARTITION"], [[p] for p in m.get("producedPartitions", {})])
    print("\nAcked partitions")
    table(["PARTITION", "SUBSCRIPTION"], [[p, s] for p, subs in m.get("ackedPartitions", {}).items()
                                           for s in subs])


def render_keys(keys: list[dict]) -> None:
    table(["OWNER", "KEY", "EPOCH", "COORDINATOR", "TRANSACTIONS", "CREATED", "LAST ACTIVE"], [
        [k.get("owner"), k.get("transactionKey"), k.get("epoch"), k.get("coordinatorId"),
         " ".join(k.get("transactions") or []) or None, timestamp(k.get("createdAt")),
         timestamp(k.get("lastActiveAt"))] for k in keys])


def render_key(k: dict) -> None:
    table(["FIELD", "VALUE"], [
        ["owner", k.get("owner")], ["transactionKey", k.get("transactionKey")], ["epoch", k.get("epoch")],
        ["coordinatorId", k.get("coordinatorId")],
        ["transactions", " ".join(k.get("transactions") or []) or None],
        ["createdAt", timestamp(k.get("createdAt"))], ["lastActiveAt", timestamp(k.get("lastActiveAt"))]])
