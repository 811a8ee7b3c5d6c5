"""Range checks at the edge: what a request may carry before any service code sees it.

Pure: no I/O.  Every protobuf route runs :func:`check_message` on its parsed request
(magnetar_runtime.app.proto_route), so a value PostgreSQL or the code behind would
choke on is a 400 naming the field, never a database error or a crash:

- ``uint64`` fields (ids, sequence ids, entry ids, transaction bits, times) land in
  ``int8`` columns: at most 2^63 - 1;
- ``uint32`` fields (counts, waits, coordinator ids) land in ``int4`` columns: at most
  2^31 - 1;
- enum fields hold a value the enum declares (proto3 keeps unknown numbers);
- strings carry no NUL character (PostgreSQL text cannot hold one);
- a few fields have a narrower range of their own (:data:`FIELD_BOUNDS`).

``bytes`` fields (payloads, batches) are not looked at here.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from magnetar_protocol.errors import BadRequest

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

_T = FieldDescriptor
_UNSIGNED_64 = {_T.TYPE_UINT64, _T.TYPE_FIXED64}
_UNSIGNED_32 = {_T.TYPE_UINT32, _T.TYPE_FIXED32}

# Fields whose meaning allows less than their wire type does.
FIELD_BOUNDS: dict[str, tuple[int, int]] = {
    # -1 is "the whole entry"; any other negative index made the cursor code shift by a
    # negative count.  The upper bound against the entry's real size is the broker's.
    "magnetar.v1.Position.batch_index": (-1, INT32_MAX),
    "magnetar.v1.MessageIdData.batch_index": (-1, INT32_MAX),
    "magnetar.v1.MessageIdData.partition": (-1, INT32_MAX),
    "magnetar.v1.SubscribeRequest.priority_level": (0, INT32_MAX),
    # A transaction id's most significant bits are its coordinator's id (int4 columns).
    "magnetar.v1.TxnId.most_bits": (0, INT32_MAX),
}

# What each kind of field may hold, and why: said in the 400's reason.
_WHY_64 = "ids, sequence ids and times are stored as signed 64-bit integers"
_WHY_32 = "counts and small ids are stored as signed 32-bit integers"

_plans: dict[Any, tuple] = {}  # FieldDescriptor -> how to check its values


def _plan(fd: FieldDescriptor) -> tuple:
    """(kind, detail) for one field, computed once per field."""
    plan = _plans.get(fd)
    if plan is not None:
        return plan
    if fd.full_name in FIELD_BOUNDS:
        lo, hi = FIELD_BOUNDS[fd.full_name]
        plan = ("int", (lo, hi, "see proto/magnetar.proto"))
    elif fd.type in _UNSIGNED_64:
        plan = ("int", (0, INT64_MAX, _WHY_64))
    elif fd.type in _UNSIGNED_32:
        plan = ("int", (0, INT32_MAX, _WHY_32))
    elif fd.type == _T.TYPE_ENUM:
        plan = ("enum", (frozenset(fd.enum_type.values_by_number), fd.enum_type.name))
    elif fd.type == _T.TYPE_STRING:
        plan = ("str", None)
    elif fd.type == _T.TYPE_MESSAGE:
        entry = fd.message_type
        plan = ("map", None) if entry.GetOptions().map_entry else ("msg", None)
    else:  # signed ints (their wire range is theirs), bools, bytes, floats
        plan = ("skip", None)
    _plans[fd] = plan
    return plan


def _check_value(where: str, kind: str, detail, value) -> None:
    if kind == "int":
        lo, hi, why = detail
        if not lo <= value <= hi:
            raise BadRequest(f"{where} = {value} is out of range [{lo}, {hi}] ({why})")
    elif kind == "enum":
        numbers, enum_name = detail
        if value not in numbers:
            raise BadRequest(f"{where} = {value} is not a {enum_name} value")
    elif kind == "str":
        check_text(where, value)
    elif kind == "msg":
        check_message(value, where)


def check_message(msg: Message, where: str = "") -> None:
    """Raise BadRequest naming the first field of ``msg`` (recursively) whose value no
    Magnetar service accepts (``where``: the path shown for ``msg`` itself)."""
    if not _acceptable(msg):
        _explain(msg, where)


def _acceptable(msg: Message) -> bool:
    """The check without building any field path; only a refused message is walked
    again (``_explain``) to say why.  Reads each checked field by name (a compiled list
    per message type): ~0.5 µs a small nested message, where ``ListFields`` and paths
    cost ~1.7 µs."""
    for name, kind, detail, repeated in _compiled.get(msg.DESCRIPTOR) or _compile(msg.DESCRIPTOR):
        if kind == "columns":  # many small messages (acked positions): field by field
            items = getattr(msg, name)
            if items and not all(_scalar_ok(k, d, True, list(map(get, items))) for get, k, d in detail):
                return False
            continue
        if kind == "msg":
            if repeated:
                if not all(map(_acceptable, getattr(msg, name))):
                    return False
            elif msg.HasField(name) and not _acceptable(getattr(msg, name)):
                return False
            continue
        if not _scalar_ok(kind, detail, repeated, getattr(msg, name)):
            return False
    return True


def _scalar_ok(kind: str, detail, repeated: bool, value) -> bool:
    if kind == "int":
        if repeated:
            return not value or (detail[0] <= min(value) and max(value) <= detail[1])
        return detail[0] <= value <= detail[1]
    if kind == "str":
        return "\x00" not in ("".join(value) if repeated else value)
    if kind == "enum":
        return detail[0].issuperset(value if repeated else (value,))
    return not len(value)  # a map: rare (no request has one today), the slow walk decides


_compiled: dict[Any, list] = {}  # message Descriptor -> its fields that need a check


def _compile(descriptor) -> list:
    checks = []
    for fd in descriptor.fields:
        kind, detail = _plan(fd)
        if kind == "skip":
            continue
        repeated = fd.is_repeated and kind != "map"
        if kind == "msg" and repeated:
            inner = _compiled.get(fd.message_type) or _compile(fd.message_type)
            if all(k in ("int", "str", "enum") and not r for _, k, _, r in inner):
                kind, detail = "columns", [(attrgetter(n), k, d) for n, k, d, _ in inner]
        checks.append((fd.name, kind, detail, repeated))
    _compiled[descriptor] = checks
    return checks


def _explain(msg: Message, where: str) -> None:
    prefix = f"{where}." if where else f"{msg.DESCRIPTOR.name}."
    for fd, value in msg.ListFields():
        kind, detail = _plan(fd)
        if kind == "skip":
            continue
        name = prefix + fd.name
        if kind == "map":
            key_fd = fd.message_type.fields_by_name["key"]
            value_fd = fd.message_type.fields_by_name["value"]
            key_kind, key_detail = _plan(key_fd)
            value_kind, value_detail = _plan(value_fd)
            for key in value:
                _check_value(f"{name}[key]", key_kind, key_detail, key)
                _check_value(f"{name}[{key!r}]", value_kind, value_detail, value[key])
        elif fd.is_repeated:
            for i, item in enumerate(value):
                _check_value(f"{name}[{i}]", kind, detail, item)
        else:
            _check_value(name, kind, detail, value)


def check_text(what: str, value: str) -> str:
    """``value`` unless it holds a NUL character (PostgreSQL text cannot store one) or a
    lone surrogate (JSON's "\\ud800": not encodable as UTF-8)."""
    if "\x00" in value:
        raise BadRequest(f"{what} contains a NUL character (\\x00), which no name, role or "
                         "token may hold")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise BadRequest(f"{what} is not valid Unicode text (a lone surrogate)") from None
    return value


def check_json(value: Any, what: str = "the body") -> Any:
    """``value`` (a parsed JSON document) unless a string in it, key or value, holds a
    NUL character or an integer in it does not fit a signed 64-bit column."""
    if isinstance(value, str):
        check_text(what, value)
    elif isinstance(value, bool) or value is None or isinstance(value, float):
        pass
    elif isinstance(value, int):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise BadRequest(f"{what} = {value} does not fit a signed 64-bit integer")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_json(item, f"{what}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(f"a key of {what}", key)
            check_json(item, f"{what}.{key}")
    return value
