"""Arguments checked before anything is sent: names (the service's own rules, from
magnetar_protocol), TENANT/NAMESPACE, durations, transaction ids."""

from __future__ import annotations

import re

from magnetar.admin_cli._http import UsageError, q


def topic(value: str):
    from magnetar_protocol.errors import InvalidTopicName
    from magnetar_protocol.topics import TopicName

    try:
        return TopicName.parse(value)
    except InvalidTopicName as exc:
        raise UsageError(f"invalid topic {value!r}: {exc}") from None


def name(kind: str, value: str) -> str:
    from magnetar_protocol.errors import InvalidTopicName
    from magnetar_protocol.topics import validate_name_part

    try:
        return validate_name_part(kind, value)
    except InvalidTopicName as exc:
        raise UsageError(str(exc)) from None


def namespace(value: str) -> tuple[str, str]:
    parts = value.split("/")
    if len(parts) != 2:
        raise UsageError(f"namespace {value!r} must be TENANT/NAMESPACE, e.g. public/default")
    return name("tenant", parts[0]), name("namespace", parts[1])


def topic_path(t) -> str:
    """``/admin/v2/persistent/{tenant}/{ns}/{topic}``; admin v3 paths reuse the tail."""
    return f"/admin/v2/persistent/{topic_tail(t)}"


def topic_tail(t) -> str:
    return f"{q(t.tenant)}/{q(t.namespace)}/{q(t.local_name)}"


def csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


def duration_ms(value: str) -> int:
    """``500ms``, ``10s``, ``1m``, ``2h``, ``1d`` -> milliseconds.  A bare number is
    refused: pulsar-admin reads it as seconds, a reader of a script may read it as ms."""
    match = _DURATION.match(value)
    if not match:
        raise UsageError(f"duration {value!r} needs a number and a unit: 500ms, 10s, 1m, 2h or 1d")
    return int(float(match.group(1)) * _UNITS_MS[match.group(2)])


def txn_part(kind: str, value: int) -> int:
    # Transaction ids are two unsigned 64-bit halves (most bits = coordinator id).
    if not 0 <= value < 2 ** 63:
        raise UsageError(f"--{kind} {value} is not a transaction id part (0 to 2^63-1); "
                         "`magnetar-admin transactions slow-transactions -t 0ms` lists open ones")
    return value


def transaction_key(value: str) -> str:
    """The service's own rule (no '&', 1 to 255 UTF-8 bytes, printable), checked here
    so a bad key is a usage error before anything is sent."""
    from magnetar_protocol.keys import key_problem

    if problem := key_problem(value):
        raise UsageError(f"{problem}; `magnetar-admin transactions list-transaction-keys` lists the keys")
    return value


LATEST_ID = {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}
EARLIEST_ID = {"ledgerId": -1, "entryId": -1}
_MESSAGE_ID = re.compile(r"^\s*(-?\d+):(-?\d+)(?::(-?\d+))?(?::(-?\d+))?\s*$")


def message_id(value: str) -> dict:
    """``earliest``, ``latest``, or ``LEDGER:ENTRY[:PARTITION[:BATCH]]`` (pulsar-admin's
    form; Magnetar's ledger is 0) -> the admin API's message id body."""
    if value.strip().lower() == "earliest":
        return dict(EARLIEST_ID)
    if value.strip().lower() == "latest":
        return dict(LATEST_ID)
    match = _MESSAGE_ID.match(value)
    if not match:
        raise UsageError(f"message id {value!r}: use earliest, latest or LEDGER:ENTRY[:PARTITION[:BATCH]] "
                         "such as 0:12 (Magnetar keeps one ledger per partition, ledger 0)")
    ledger, entry, partition, batch = match.groups()
    return {"ledgerId": int(ledger), "entryId": int(entry),
            "partitionIndex": int(partition) if partition is not None else -1,
            "batchIndex": int(batch) if batch is not None else -1}
