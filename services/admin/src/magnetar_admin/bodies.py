"""Rules for request bodies and names.  Pure: no I/O.

Bodies are parsed as JSON whatever their content type (``curl -d 4`` sends form
content type), and every rejection names what was wrong and what is expected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from magnetar_protocol.errors import BadRequest, NotFound
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_protocol.validate import INT32_MAX, INT64_MAX, check_json

MISSING = object()  # an empty body


def parse_json(raw: bytes) -> Any:
    """The body as JSON; MISSING when it is empty."""
    if not raw.strip():
        return MISSING
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    return check_json(body)  # NULs, lone surrogates, integers past 64 bits: 400 here


def partition_count(body: Any, limit: int) -> int:
    """The body of PUT .../partitions: the count as a JSON integer (Pulsar), or
    {"partitions": N}."""
    value = body.get("partitions", MISSING) if isinstance(body, dict) else body
    if value is MISSING:
        raise BadRequest("the body must be the partition count, a JSON integer such as 4")
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"the partition count must be an integer (got {json.dumps(value)})")
    if value <= 0:
        raise BadRequest(f"the partition count must be at least 1 (got {value})")
    if value > limit:
        raise BadRequest(f"the partition count {value} is above the limit {limit} "
                         "(MAGNETAR_MAX_PARTITIONS)")
    return value


def boolean(body: Any, what: str) -> bool:
    if not isinstance(body, bool):
        shown = "an empty body" if body is MISSING else json.dumps(body)
        raise BadRequest(f"the body must be true or false to set {what} (got {shown})")
    return body


def tenant_info(body: Any, cluster: str) -> list[str]:
    """A TenantInfo body (optional) -> its admin roles.  ``allowedClusters`` may name
    only this deployment's cluster: Magnetar has no other."""
    if body is MISSING or body is None:
        return []
    if not isinstance(body, dict):
        raise BadRequest('the body must be a TenantInfo object: {"adminRoles": [...], '
                         '"allowedClusters": [...]}')
    roles = body.get("adminRoles") or []
    if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
        raise BadRequest("adminRoles must be a list of role names")
    clusters = body.get("allowedClusters") or []
    if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
        raise BadRequest("allowedClusters must be a list of cluster names")
    unknown = sorted(set(clusters) - {cluster})
    if unknown:
        raise BadRequest(f"cluster(s) {', '.join(unknown)} do not exist; this Magnetar is the "
                         f"one cluster {cluster!r}")
    return sorted(set(roles))


def tenant(name: str) -> str:
    return validate_name_part("tenant", name)


def namespace(tenant_name: str, name: str) -> tuple[str, str]:
    return validate_name_part("tenant", tenant_name), validate_name_part("namespace", name)


def topic(tenant_name: str, namespace_name: str, local: str) -> TopicName:
    return TopicName.parse(f"persistent://{tenant_name}/{namespace_name}/{local}")


def subscription(name: str) -> str:
    return validate_name_part("subscription", name)


@dataclass(frozen=True)
class MessageIdBody:
    """A Pulsar MessageIdImpl as JSON, in Magnetar's terms.  ``entry_id`` None: latest
    (after the last message); -1: earliest."""
    entry_id: int | None
    batch_index: int = -1
    partition: int = -1


EARLIEST = MessageIdBody(-1)
LATEST = MessageIdBody(None)


def _int_field(body: dict, key: str, default: Any, low: int, high: int) -> int:
    value = body.get(key, default)
    if value is MISSING:
        raise BadRequest(f'the message id needs "{key}" (an integer)')
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f'"{key}" must be an integer (got {json.dumps(value)})')
    if not low <= value <= high:
        raise BadRequest(f'"{key}" must be between {low} and {high} (got {value})')
    return value


def message_id(body: Any, default: MessageIdBody | None = None) -> MessageIdBody:
    """A message id body ``{"ledgerId", "entryId", "partitionIndex", "batchIndex"}``
    (Pulsar's MessageIdImpl).  Magnetar keeps one ledger per partition, ledger 0, as
    ``MessageId.ledger_id()`` says; Pulsar's earliest (-1:-1) and latest
    (2^63-1:2^63-1) are understood.  ``default`` answers an empty body (else 400)."""
    if body is MISSING and default is not None:
        return default
    if not isinstance(body, dict):
        shown = "an empty body" if body is MISSING else json.dumps(body)
        raise BadRequest('the body must be a message id: {"ledgerId": 0, "entryId": 12, '
                         f'"partitionIndex": -1, "batchIndex": -1}} (got {shown})')
    ledger = _int_field(body, "ledgerId", MISSING, -1, INT64_MAX)
    entry = _int_field(body, "entryId", MISSING, -1, INT64_MAX)
    partition = _int_field(body, "partitionIndex", -1, -1, INT32_MAX)
    batch = _int_field(body, "batchIndex", -1, -1, INT32_MAX)
    if ledger == INT64_MAX and entry == INT64_MAX:
        return MessageIdBody(None, -1, partition)
    if ledger == -1 and entry == -1:
        return MessageIdBody(-1, -1, partition)
    if ledger != 0:
        raise NotFound(f"ledger {ledger} does not exist: Magnetar keeps one ledger per partition, "
                       "ledger 0 (earliest is -1:-1, latest 9223372036854775807:9223372036854775807)")
    if entry < 0:
        raise BadRequest(f"entryId must be at least 0 in ledger 0 (got {entry})")
    return MessageIdBody(entry, batch, partition)
