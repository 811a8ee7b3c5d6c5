"""What the data source asks of Magnetar: clients, topic discovery, the end of each
partition (the admin API's ``lastConfirmedEntry``) and reading one range of entries."""

from __future__ import annotations

import time
from typing import Iterator

import magnetar
from magnetar.admin_cli._http import AdminApi, Refused, Unreachable, q
from magnetar.spark._offsets import split_partition
from magnetar.spark._options import Connection, MagnetarOptionError, ReadOptions
from magnetar_protocol.tlsctx import client_context
from magnetar_protocol.topics import TopicName

READ_POLL_MS = 500  # a reader's wait before asking whether more is visible at all


class MagnetarSparkError(RuntimeError):
    """The data source could not do what Spark asked (the message says why)."""


def client(conn: Connection, transaction_key: str | None = None) -> magnetar.Client:
    return magnetar.Client(conn.service_url, transaction_key=transaction_key,
                           auth_token=conn.auth_token, listener_name=conn.listener_name, **conn.tls())


def _admin_api(conn: Connection) -> AdminApi:
    tls = conn.tls()
    ssl = client_context(*(tls.get(k) for k in ("tls_trust_certs_file_path", "tls_certificate_file_path",
                                                   "tls_private_key_file_path"))) if tls else None
    return AdminApi(conn.admin_url, conn.auth_token, ssl=ssl)


def admin(conn: Connection) -> AdminApi:
    if not conn.admin_url:
        raise MagnetarOptionError(
            "option 'admin.url' is required to read: the end of each partition comes from the "
            "admin API, e.g. .option('admin.url', 'http://127.0.0.1:8081')")
    return _admin_api(conn)


def _get(api: AdminApi, path: str):
    try:
        return api.request("GET", path)
    except Refused as exc:
        raise MagnetarSparkError(f"admin API refused GET {path}: {exc.reason}") from None
    except Unreachable as exc:
        raise MagnetarSparkError(f"admin API at {api.base_url} is unreachable: {exc}") from None


def _topic_path(name: str) -> str:
    t = TopicName.parse(name)
    return f"/admin/v2/persistent/{q(t.tenant)}/{q(t.namespace)}/{q(t.local_name)}"


def discover(opts: ReadOptions) -> list[str]:
    """Every partition (full name) of the topics read, sorted."""
    api = admin(opts.connection)
    if opts.pattern is not None:
        tenant, namespace = opts.pattern.namespace.split("/")
        names = _get(api, f"/admin/v2/persistent/{q(tenant)}/{q(namespace)}")
        bases = sorted({TopicName.parse(n).base.full for n in names if opts.pattern.matches(n)})
    else:
        bases = list(opts.topics)
    out = []
    for base in bases:
        count = _get(api, _topic_path(base) + "/partitions")["partitions"]
        if count:
            out.extend(TopicName.parse(base).partition(i).full for i in range(count))
        elif opts.pattern is not None or _exists(api, base):
            out.append(base)
        else:
            raise MagnetarSparkError(f"topic {base} does not exist (create it, or check 'topic')")
    return sorted(out)


def _exists(api: AdminApi, name: str) -> bool:
    t = TopicName.parse(name)
    return name in _get(api, f"/admin/v2/persistent/{q(t.tenant)}/{q(t.namespace)}")


def latest_offsets(opts: ReadOptions, partitions: list[str]) -> dict[str, int]:
    """{partition: its next entry id}: everything below is committed and readable."""
    return log_bounds(opts, partitions)[1]


def log_bounds(opts: ReadOptions, partitions: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """({partition: its first stored entry id}, {partition: its next entry id}): entries
    below the first were trimmed (retention); everything from it to the end is readable."""
    api = admin(opts.connection)
    earliest, latest = {}, {}
    for name in partitions:
        stats = _get(api, _topic_path(name) + "/internalStats")
        latest[name] = int(str(stats["lastConfirmedEntry"]).split(":")[0]) + 1  # "-1:-1" for an empty log
        first = int(str(stats.get("firstEntry", "-1:-1")).split(":")[0])
        earliest[name] = latest[name] if first < 0 else first
    return earliest, latest


def last_entry(conn: Connection, topic: str) -> int | None:
    """The last entry id of a non-partitioned topic (-1: empty), None when unknown (no
    admin.url, or the topic does not exist yet)."""
    if not conn.admin_url:
        return None
    try:
        stats = _admin_api(conn).request(
            "GET", _topic_path(topic) + "/internalStats")
    except (Refused, Unreachable):
        return None
    return int(str(stats["lastConfirmedEntry"]).split(":")[0])


def read_range(conn: Connection, partition: str, start: int, end: int, poll_timeout_ms: int,
               fail_on_data_loss: bool = True) -> Iterator[magnetar.Message]:
    """The messages of entries [start, end) of one partition.  Every entry below ``end``
    is committed (offsets come from the log's end), so a reader from ``start`` sees
    exactly them, the last one ending the read.  A reader that sees nothing new for
    ``poll_timeout_ms`` means entries are missing (deleted since planned): that raises,
    unless ``fail_on_data_loss`` is false and the partition has nothing more at all."""
    _, index = split_partition(partition)
    stalled_since = None  # a long range may take long; only a wait without progress fails
    c = client(conn)
    try:
        reader = c.create_reader(partition, magnetar.MessageId(index, start, -1),
                                 start_message_id_inclusive=True)
        while True:
            try:
                msg = reader.read_next(timeout_millis=READ_POLL_MS)
            except magnetar.Timeout:
                if _skipped_through(reader, end - 1):
                    return  # the range's last entry did not decode: skipped (logged)
                # Not "has nothing more, so done": the broker may learn of an entry the
                # admin API already reported a moment later than the database has it.
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > poll_timeout_ms / 1000:
                    if not fail_on_data_loss and not reader.has_message_available():
                        return
                    raise MagnetarSparkError(
                        f"{partition}: entries before {end} did not arrive within "
                        f"{poll_timeout_ms} ms (option 'pollTimeoutMs'); if they were deleted, "
                        "set .option('failOnDataLoss', 'false') to go on without them") from None
                continue
            stalled_since = None
            mid = msg.message_id()
            if mid.entry_id() >= end:
                return
            yield msg
            if mid.entry_id() == end - 1 and mid.batch_index() >= mid.batch_size() - 1:
                return
    finally:
        c.close()


def _skipped_through(reader: magnetar.Reader, entry_id: int) -> bool:
    """Whether the reader went past ``entry_id`` without a message to show for it (an
    entry whose batch did not decode is skipped by the client, docs/security.md)."""
    returned = reader._r.parts[0].returned
    return reader.undecodable_entries() > 0 and returned is not None and returned[0] >= entry_id
