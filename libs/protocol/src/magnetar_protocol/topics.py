"""Topic names, as Pulsar spells them.  Pure: no I/O.

    persistent://tenant/namespace/name            full form
    tenant/namespace/name                         domain implied
    name                                          public/default implied
    persistent://t/ns/name-partition-3            partition 3 of a partitioned topic
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar_protocol.errors import InvalidTopicName, UnsupportedTopicDomain

DOMAIN = "persistent"
# Refused, not supported: docs/pulsar-protocol.md says why.
NON_PERSISTENT = "non-persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
MAX_TOPIC_NAME_BYTES = 255

_NAME_PART = re.compile(r"^[A-Za-z0-9_=:.\-]+$")
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]*)$")


def validate_name_part(kind: str, value: str) -> str:
    """Check a tenant, namespace or topic local name; return it unchanged."""
    if not value:
        raise InvalidTopicName(f"{kind} name is empty")
    if not _NAME_PART.match(value):
        raise InvalidTopicName(
            f"{kind} name {value!r} has a character outside [A-Za-z0-9_=:.-]"
        )
    if ".." in value:
        raise InvalidTopicName(f"{kind} name {value!r} contains '..'")
    return value


@dataclass(frozen=True, slots=True)
class TopicName:
    tenant: str
    namespace: str
    local_name: str  # includes the -partition-N suffix for a partition

    @classmethod
    def parse(cls, topic: str) -> "TopicName":
        if not isinstance(topic, str) or not topic:
            raise InvalidTopicName("topic name is empty")
        rest = topic
        if "://" in topic:
            domain, rest = topic.split("://", 1)
            if domain == NON_PERSISTENT:
                raise UnsupportedTopicDomain(
                    f"topic {topic!r}: Magnetar has no non-persistent topics (every message is "
                    "stored in PostgreSQL before it is acknowledged); use persistent://"
                )
            if domain != DOMAIN:
                raise InvalidTopicName(
                    f"topic {topic!r}: domain {domain!r} is not supported, use persistent://"
                )
            parts = rest.split("/")
            if len(parts) != 3:
                raise InvalidTopicName(
                    f"topic {topic!r} must be persistent://tenant/namespace/topic"
                )
        else:
            parts = rest.split("/")
            if len(parts) == 1:
                parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]]
            elif len(parts) != 3:
                raise InvalidTopicName(
                    f"topic {topic!r} must be 'name', 'tenant/namespace/name' or a full "
                    "persistent:// name"
                )
        tenant, namespace, local = parts
        validate_name_part("tenant", tenant)
        validate_name_part("namespace", namespace)
        validate_name_part("topic", local)
        name = cls(tenant, namespace, local)
        if len(name.full.encode()) > MAX_TOPIC_NAME_BYTES:
            raise InvalidTopicName(
                f"topic name is {len(name.full.encode())} bytes, the limit is "
                f"{MAX_TOPIC_NAME_BYTES}"
            )
        return name

    @property
    def full(self) -> str:
        return f"{DOMAIN}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """-1 unless this names one partition of a partitioned topic."""
        m = _PARTITION.match(self.local_name)
        return int(m.group("index")) if m else -1

    @property
    def base(self) -> "TopicName":
        """The partitioned topic a partition belongs to (itself otherwise)."""
        m = _PARTITION.match(self.local_name)
        return TopicName(self.tenant, self.namespace, m.group("base")) if m else self

    def creation_problem(self) -> str | None:
        """Why this name may not be created as a topic of its own (None: it may).  One
        rule for the admin's create and the broker's auto-creation: ``-partition-`` is
        kept for the partitions of partitioned topics (Pulsar refuses it too), and a
        name needs a letter or a digit (``-`` or ``.`` alone is no name)."""
        if PARTITION_SUFFIX in self.local_name:
            return (f"{self.full} names a partition (…-partition-N) or contains "
                    f"'{PARTITION_SUFFIX}', which is kept for the partitions of partitioned "
                    "topics; create a partitioned topic, or choose another name")
        if not any(c.isalnum() for c in self.local_name):
            return f"{self.full}: a topic name needs at least one letter or digit"
        return None

    def partition(self, index: int) -> "TopicName":
        return TopicName(self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}")

    def __str__(self) -> str:
        return self.full


def canonical(topic: str) -> str:
    return TopicName.parse(topic).full
