"""A topic's schema registry, its rules (Pulsar's SchemaRegistryService and the topic's
addSchema / addSchemaIfIdleOrCheckCompatible): which version a producer, a consumer or
an upload gets, or why it is refused.  Pure: no I/O; the broker reads a topic's versions,
asks these rules, and writes what they decide.

- Versions are per topic (a partitioned topic's, shared by its partitions), 0, 1, 2, ...
  A deletion is a version too, with no schema: what came before it no longer counts for
  compatibility or lookups, and versions go on growing after it.
- A schema identical to a live one (same type and definition: its hash) gets that one's
  version: nothing is added and no strategy is asked.
- A producer's new schema is added when the namespace's ``isAllowAutoUpdateSchema``
  allows (the first schema of a topic too, as Pulsar) and the strategy accepts it.
- A producer without a schema (bytes) is refused only on a topic with a schema under
  ``schemaValidationEnforced``.
- A consumer's schema is checked against the topic's (schemacompat's consumer rule), or
  registered as a producer's would be when the topic has none and is idle (no producer,
  no other consumer, no data); a busy topic without a schema refuses it ("Topic does not
  have schema to check", Pulsar's words).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar_protocol.errors import IncompatibleSchema, TopicNotFound
from magnetar_protocol.schemacompat import (
    DEFAULT_STRATEGY,
    check_strategy,
    consumer_incompatibility,
    incompatibility,
)
from magnetar_protocol.schemainfo import Schema


@dataclass(frozen=True, slots=True)
class Stored:
    """One version of a topic's registry."""
    version: int
    schema: Schema | None   # None: the schema was deleted at this version
    hash: bytes = b""
    timestamp: int = 0      # ms since the epoch


@dataclass(frozen=True, slots=True)
class SchemaPolicy:
    """A namespace's schema policies, resolved against the broker's defaults."""
    strategy: str = DEFAULT_STRATEGY
    allow_auto_update: bool = True
    validation_enforced: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision: ``version`` to answer with, and whether it must be added first."""
    version: int | None     # None: no schema (a bytes producer or consumer)
    add: bool = False


NONE = Verdict(None)


def live(versions: Sequence[Stored]) -> list[Stored]:
    """The versions that count: those after the last deletion (oldest first)."""
    start = 0
    for i, stored in enumerate(versions):
        if stored.schema is None:
            start = i + 1
    return list(versions[start:])


def next_version(versions: Sequence[Stored]) -> int:
    return versions[-1].version + 1 if versions else 0


def latest(versions: Sequence[Stored]) -> Stored:
    """The topic's current schema, or TopicNotFound (Pulsar's answer for a topic without
    one, which clients read as "no schema")."""
    current = live(versions)
    if not current:
        raise TopicNotFound("the topic has no schema" if not versions else "the topic's schema was deleted")
    return current[-1]


def at(versions: Sequence[Stored], version: int) -> Stored:
    """Version ``version`` (a deleted one or one before a deletion still answers: a message
    written with it must stay readable), or TopicNotFound."""
    for stored in versions:
        if stored.version == version and stored.schema is not None:
            return stored
    raise TopicNotFound(f"the topic has no schema version {version}")


def identical(versions: Sequence[Stored], schema: Schema) -> int | None:
    digest = schema.hash
    for stored in reversed(live(versions)):
        if stored.hash == digest:
            return stored.version
    return None


def _new_version(versions: Sequence[Stored], schema: Schema, strategy: str) -> Verdict:
    problem = incompatibility(schema.comparable(), [s.schema.comparable() for s in live(versions)
                                                    if s.schema is not None], strategy)
    if problem is not None:
        raise IncompatibleSchema(f"incompatible schema ({strategy}): {problem}")
    return Verdict(next_version(versions), add=True)


def for_producer(versions: Sequence[Stored], schema: Schema | None, policy: SchemaPolicy) -> Verdict:
    check_strategy(policy.strategy)
    if schema is None:
        if policy.validation_enforced and live(versions):
            raise IncompatibleSchema("a producer without a schema cannot write to a topic with a schema while "
                                     "the namespace's schemaValidationEnforced is on")
        return NONE
    found = identical(versions, schema)
    if found is not None:
        return Verdict(found)
    if not policy.allow_auto_update:
        raise IncompatibleSchema("the schema is not registered and the namespace's isAllowAutoUpdateSchema is "
                                 "off: upload it with the admin API (schemas upload) first")
    return _new_version(versions, schema, policy.strategy)


def for_upload(versions: Sequence[Stored], schema: Schema, policy: SchemaPolicy) -> Verdict:
    """An operator's upload (admin API, GET_OR_CREATE_SCHEMA): as a producer's, except that
    isAllowAutoUpdateSchema governs clients only."""
    found = identical(versions, schema)
    if found is not None:
        return Verdict(found)
    return _new_version(versions, schema, check_strategy(policy.strategy))


def for_consumer(versions: Sequence[Stored], schema: Schema | None, policy: SchemaPolicy,
                 idle: bool) -> Verdict:
    check_strategy(policy.strategy)
    if schema is None:
        return NONE
    current = [s.schema.comparable() for s in live(versions) if s.schema is not None]
    if not current:
        if not idle:
            raise IncompatibleSchema("the topic does not have a schema to check the consumer's against (it has "
                                     "producers, consumers or data without one)")
        return for_producer(versions, schema, policy)
    found = identical(versions, schema)
    if policy.strategy == "ALWAYS_COMPATIBLE":
        return Verdict(found)
    problem = consumer_incompatibility(schema.comparable(), current, policy.strategy)
    if problem is not None and found is None:
        raise IncompatibleSchema(f"incompatible consumer schema ({policy.strategy}): {problem}")
    return Verdict(found)


def check_upload(versions: Sequence[Stored], schema: Schema, policy: SchemaPolicy) -> tuple[str | None, int | None]:
    """(why an upload of ``schema`` would be refused or None, an identical version or None):
    the admin's compatibility test."""
    found = identical(versions, schema)
    if found is not None:
        return None, found
    try:
        _new_version(versions, schema, check_strategy(policy.strategy))
    except IncompatibleSchema as exc:
        return exc.message, None
    return None, None
