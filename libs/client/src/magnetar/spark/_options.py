"""The ``magnetar`` data source's options, checked once on the driver.  Pure: no I/O.

Names and meanings follow Spark's Kafka connector and the Pulsar connector, so a Spark
user's habits carry over.  Spark hands options over lower-cased, so they are looked up
lower-cased and named in errors as documented (docs/spark.md).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass

from magnetar.spark._offsets import OffsetSpec, parse_offsets
from magnetar_protocol.errors import InvalidTopicName
from magnetar_protocol.keys import key_problem
from magnetar_protocol.listeners import listener_name_problem
from magnetar_protocol.topics import TopicName

DEFAULT_TXN_TIMEOUT_MS = 600_000  # a Spark job or micro-batch must finish within it
DEFAULT_POLL_TIMEOUT_MS = 120_000  # how long a task waits for entries the offsets promised

# Spark hands the source some options of its own (a streaming query's queryName, the
# path of .load(path)/.save(path)): accepted and ignored, not "unknown".
SPARK_OWN = ("queryName", "path")
# tls.*: the client's tls_* options (pulsar-client's names), for https:// services.
TLS = ("tls.trustCertsFilePath", "tls.certificateFilePath", "tls.privateKeyFilePath")
COMMON = ("service.url", "auth.token", "listener.name") + TLS + SPARK_OWN
READ = COMMON + ("admin.url", "topic", "topics", "topicsPattern", "startingOffsets",
                 "endingOffsets", "maxOffsetsPerTrigger", "failOnDataLoss", "minPartitions",
                 "maxRecordsPerPartition", "pollTimeoutMs")
WRITE = COMMON + ("admin.url", "topic", "transactionKeyPrefix", "transactionTimeoutMs",
                  "checkpointLocation", "progressTopic", "ackSubscription")


class MagnetarOptionError(ValueError):
    """A missing, unknown or invalid option of the ``magnetar`` data source."""


def _known(names: tuple[str, ...]) -> dict[str, str]:
    return {n.lower(): n for n in names}


def _check_names(options: dict, names: tuple[str, ...], what: str) -> dict[str, str]:
    """The options keyed by their documented spelling; an unknown one raises."""
    known = _known(names)
    out = {}
    for key, value in options.items():
        name = known.get(key.lower())
        if name is None:
            close = difflib.get_close_matches(key.lower(), list(known), n=1)
            hint = f"; did you mean {known[close[0]]!r}?" if close else ""
            raise MagnetarOptionError(
                f"magnetar {what}: unknown option {key!r}{hint} "
                f"(options: {', '.join(sorted(names, key=str.lower))}; see docs/spark.md)")
        out[name] = value
    return out


def _required(opts: dict, name: str, example: str) -> str:
    value = opts.get(name)
    if value is None or not str(value).strip():
        raise MagnetarOptionError(f"option {name!r} is required, e.g. .option({name!r}, {example!r})")
    return str(value).strip()


def _int(opts: dict, name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise MagnetarOptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise MagnetarOptionError(f"option {name!r} must be at least {minimum}, got {value}")
    return value


def _bool(opts: dict, name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise MagnetarOptionError(f"option {name!r} must be true or false, got {raw!r}")
    return text == "true"


def _topic(name: str, option: str) -> str:
    try:
        return TopicName.parse(name.strip()).full
    except InvalidTopicName as exc:
        raise MagnetarOptionError(f"option {option!r}: {exc}") from None


@dataclass(frozen=True)
class Connection:
    service_url: str
    auth_token: str | None
    admin_url: str | None
    listener_name: str | None = None  # the client's listener_name (outside Kubernetes)
    # https:// services: the CA, and a client certificate under mutual TLS.
    tls_trust_certs_file_path: str | None = None
    tls_certificate_file_path: str | None = None
    tls_private_key_file_path: str | None = None

    def tls(self) -> dict[str, str]:
        """The client's tls_* keyword arguments that are set."""
        given = {"tls_trust_certs_file_path": self.tls_trust_certs_file_path,
                 "tls_certificate_file_path": self.tls_certificate_file_path,
                 "tls_private_key_file_path": self.tls_private_key_file_path}
        return {k: v for k, v in given.items() if v}


def _urls(value: str | None, name: str) -> str | None:
    """``value`` when every comma-separated part is an http(s) URL."""
    if value is None:
        return None
    for url in value.split(","):
        if not re.match(r"^https?://[^/\s]+", url.strip()):
            raise MagnetarOptionError(f"option {name!r} must be http:// or https:// URLs "
                                      f"(comma-separated), got {value!r}")
    return value


def _connection(opts: dict) -> Connection:
    listener = opts.get("listener.name") or None
    if listener is not None and (problem := listener_name_problem(listener)):
        raise MagnetarOptionError(f"option 'listener.name': {problem}")
    return Connection(_urls(_required(opts, "service.url", "http://127.0.0.1:8080"), "service.url"),
                      opts.get("auth.token") or None,
                      _urls(opts.get("admin.url") or None, "admin.url"), listener,
                      *(opts.get(name) or None for name in TLS))


@dataclass(frozen=True)
class TopicPattern:
    """``topicsPattern``: a regular expression over the topic names of one namespace."""

    namespace: str  # tenant/namespace
    regex: str

    def matches(self, full_name: str) -> bool:
        name = TopicName.parse(full_name)
        return (name.namespace_name == self.namespace
                and re.fullmatch(self.regex, name.base.local_name) is not None)


def parse_pattern(text: str) -> TopicPattern:
    """``regex`` (public/default), ``tenant/namespace/regex`` or
    ``persistent://tenant/namespace/regex``."""
    rest = text.strip()
    if rest.startswith("persistent://"):
        rest = rest[len("persistent://"):]
    parts = rest.split("/", 2)
    namespace, regex = ("public/default", parts[0]) if len(parts) == 1 else (
        "/".join(parts[:2]), parts[2] if len(parts) == 3 else "")
    try:
        re.compile(regex)
    except re.error as exc:
        raise MagnetarOptionError(f"option 'topicsPattern': {regex!r} is not a regular "
                                  f"expression ({exc})") from None
    if len(parts) == 2 or not regex:
        raise MagnetarOptionError("option 'topicsPattern' must be 'regex', "
                                  "'tenant/namespace/regex' or 'persistent://tenant/namespace/regex'")
    return TopicPattern(namespace, regex)


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    topics: tuple[str, ...]  # full names; empty when a pattern selects them
    pattern: TopicPattern | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    poll_timeout_ms: int


def read_options(options: dict, streaming: bool) -> ReadOptions:
    """The options of ``spark.read`` (``streaming=False``) or ``spark.readStream``."""
    what = "streaming read" if streaming else "read"
    opts = _check_names(dict(options), READ, what)
    chosen = [n for n in ("topic", "topics", "topicsPattern") if opts.get(n)]
    if len(chosen) != 1:
        raise MagnetarOptionError(
            "give exactly one of 'topic', 'topics' (comma-separated) or 'topicsPattern'"
            + (f"; got {', '.join(chosen)}" if chosen else ""))
    topics: tuple[str, ...] = ()
    pattern = None
    if chosen[0] == "topicsPattern":
        pattern = parse_pattern(opts["topicsPattern"])
    else:
        names = [t for t in str(opts[chosen[0]]).split(",") if t.strip()]
        if chosen[0] == "topic" and len(names) != 1:
            raise MagnetarOptionError("option 'topic' names one topic; use 'topics' for several")
        topics = tuple(dict.fromkeys(_topic(t, chosen[0]) for t in names))
    if streaming and opts.get("endingOffsets") is not None:
        raise MagnetarOptionError("option 'endingOffsets' is for batch reads (spark.read); "
                                  "a stream has no end")
    try:
        starting = parse_offsets(opts.get("startingOffsets", "latest" if streaming else "earliest"),
                                 "startingOffsets")
        ending = parse_offsets(opts.get("endingOffsets", "latest"), "endingOffsets")
    except ValueError as exc:
        raise MagnetarOptionError(str(exc)) from None
    if ending.earliest or any(v == -2 for v in ending.per_partition.values()):
        raise MagnetarOptionError("option 'endingOffsets' cannot be 'earliest' (-2); "
                                  "use 'latest' or entry ids")
    if not streaming and opts.get("maxOffsetsPerTrigger") is not None:
        raise MagnetarOptionError("option 'maxOffsetsPerTrigger' is for streaming reads; "
                                  "bound a batch read with 'endingOffsets'")
    return ReadOptions(
        connection=_connection(opts), topics=topics, pattern=pattern, starting=starting,
        ending=ending, max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        min_partitions=_int(opts, "minPartitions", None),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", None),
        poll_timeout_ms=_int(opts, "pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS))


@dataclass(frozen=True)
class WriteOptions:
    connection: Connection
    topic: str | None  # None: every row names its topic in the __topic column
    transaction_key: str | None
    transaction_timeout_ms: int
    progress_topic: str | None  # streaming only
    ack_subscription: str | None = None  # streaming only: acknowledge the input there
    checkpoint_dir: str | None = None  # the local checkpoint directory (ackSubscription)


def transaction_key_for(prefix: str | None, checkpoint: str | None) -> str | None:
    """The sink's transaction key: the prefix, else one derived from the checkpoint
    location (a restarted query, same checkpoint, gets the same key and fences the old)."""
    if prefix:
        return prefix
    if checkpoint:
        digest = hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:24]
        return f"spark-sink-{digest}"
    return None


def progress_topic_for(key: str) -> str:
    """The internal topic where a streaming sink records its committed batch ids."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return f"persistent://public/default/__magnetar-spark-sink-{digest}"


def write_options(options: dict, streaming: bool, has_topic_column: bool) -> WriteOptions:
    what = "streaming write" if streaming else "write"
    opts = _check_names(dict(options), WRITE, what)
    topic = _topic(str(opts["topic"]), "topic") if opts.get("topic") else None
    if topic is None and not has_topic_column:
        raise MagnetarOptionError("say where rows go: .option('topic', 'name') or a string "
                                  "column '__topic' naming each row's topic")
    key = transaction_key_for(opts.get("transactionKeyPrefix"), opts.get("checkpointLocation"))
    if key is not None and (problem := key_problem(key)):
        raise MagnetarOptionError(f"option 'transactionKeyPrefix': {problem}")
    if streaming and key is None:
        raise MagnetarOptionError(
            "a streaming write needs a transaction key: set .option('checkpointLocation', ...) "
            "on the query (the key is derived from it) or .option('transactionKeyPrefix', ...)")
    progress = None
    if streaming:
        progress = (_topic(str(opts["progressTopic"]), "progressTopic") if opts.get("progressTopic")
                    else progress_topic_for(key))
    ack, checkpoint_dir = opts.get("ackSubscription") or None, None
    if ack is not None:
        checkpoint_dir = _local_dir(opts.get("checkpointLocation"))
        if not streaming or checkpoint_dir is None:
            raise MagnetarOptionError(
                "option 'ackSubscription' is for streaming writes whose checkpointLocation is a "
                "local path (the batch's input offsets are read from it)")
    return WriteOptions(_connection(opts), topic, key,
                        _int(opts, "transactionTimeoutMs", DEFAULT_TXN_TIMEOUT_MS), progress,
                        ack, checkpoint_dir)


def _local_dir(location: str | None) -> str | None:
    """A checkpoint location the driver can open (a path, or a file: URI), else None."""
    if not location:
        return None
    if location.startswith("file:"):
        return "/" + location[len("file:"):].lstrip("/")
    return None if "://" in location else location
