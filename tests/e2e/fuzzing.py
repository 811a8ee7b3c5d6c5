"""A seeded protobuf fuzzer for the broker, coordinator and registry routes.

Used by tests/e2e/test_fuzz_protobuf.py (fails on any 5xx, hang or process death) and
bench/fuzz_latency.py (the same traffic next to normal produce/consume).  The requests
are a pure function of the seed (``plan``), so a failure replays with the same seed;
each failure is reported with its path and body (hex) to replay it alone.

Requests are of four kinds, in about equal parts:
- random: every field of the route's request type drawn from extreme values (0, 2^31,
  2^63, 2^64 - 1, -2, NUL strings, 300-character names, unknown enum numbers, ...);
- mutated: a valid request (with real session, producer, consumer, transaction ids and
  topics harvested from a live cluster, this role's or another role's) with one to three
  fields replaced by such values;
- garbage: random bytes, or a valid body truncated or with bits flipped;
- batched: a /v1/batch of several of the above.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from dataclasses import dataclass, field

import aiohttp
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from magnetar_protocol import magnetar_pb2 as pb

PROTOBUF = "application/x-protobuf"
T = FieldDescriptor

UINTS = [0, 1, 2, 7, 255, 65535, 2**31 - 1, 2**31, 2**32 - 1, 2**53, 2**63 - 1, 2**63, 2**64 - 1]
INT32S = [-2**31, -1000, -2, -1, 0, 1, 2, 2**27, 2**31 - 1]
INT64S = [-2**63, -2, -1, 0, 1, 2, 2**31, 2**63 - 1]
STRINGS = ["", "a", "\x00", "a\x00b", "x" * 300, "ünï☃ code", "-", "..", "a/b", "%00", " ",
           "persistent://public/default/fuzz", "public/default/fuzz-partition-0",
           "persistent://public/default/t-partition--1", "persistent://x/y/../z",
           "persistent://public/default/" + "n" * 250, "non-persistent://public/default/q",
           "sub", "reader-x", "&", "\u202e", "\t\n"]
MAX_REPEATED = 20
# 2^27 and 2^31 - 1 stalled the broker's event loop before batch indexes were bounded by
# their entry's size (issue 20 finding 3).
BATCH_INDEXES = [-2**31, -1000, -2, -1, 0, 1, 2, 99, 999, 2**27, 2**31 - 1]


def discover_routes() -> dict[str, list[tuple[str, type[Message]]]]:
    """{service kind: [(path, request type)]} as each service's api.py registers them
    (its add_routes run against a stand-in service, with proto_route recording: the
    runtime's, which proto_routes calls, and an api module's own import of it if any)."""
    import magnetar_broker.api as broker_api
    import magnetar_coordinator.api as coordinator_api
    import magnetar_registry.api as registry_api
    import magnetar_runtime.app as runtime_app

    class Anything:
        def __getattr__(self, _):
            return Anything()

        def __call__(self, *args, **kwargs):
            return Anything()

    class FakeApp:
        def __init__(self):
            self.state = Anything()

        def get(self, *args, **kwargs):
            return lambda fn: fn

        post = get

    routes: dict[str, list[tuple[str, type[Message]]]] = {}
    for kind, module in (("broker", broker_api), ("coordinator", coordinator_api),
                         ("registry", registry_api)):
        found: list[tuple[str, type[Message]]] = []
        patched = [m for m in (module, runtime_app) if hasattr(m, "proto_route")]
        originals = [m.proto_route for m in patched]
        for m in patched:
            m.proto_route = lambda app, path, request_type, handler, found=found: found.append(
                (path, request_type))
        try:
            module.add_routes(FakeApp(), Anything())
        finally:
            for m, original in zip(patched, originals):
                m.proto_route = original
        routes[kind] = found
    return routes


@dataclass
class Harvest:
    """Real ids from a live cluster, per role: what mutated requests start from."""

    topics: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    producers: list[int] = field(default_factory=list)
    consumers: list[int] = field(default_factory=list)
    txns: list[tuple[int, int]] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


def valid_batch(rng: random.Random, first_seq: int, n: int) -> bytes:
    return pb.MessageBatch(messages=[
        pb.SingleMessage(payload=rng.randbytes(rng.randint(0, 64)), sequence_id=first_seq + i)
        for i in range(n)]).SerializeToString()


class Generator:
    """Request bodies for one route type, drawn from ``rng`` and the harvested ids."""

    def __init__(self, rng: random.Random, harvest: Harvest) -> None:
        self.rng = rng
        self.h = harvest

    # ------------------------------------------------------------ values

    def _named(self, name: str):
        """A harvested value for a field with this name, or None."""
        h, rng = self.h, self.rng
        pools = {
            "session_id": h.sessions, "producer_id": h.producers, "consumer_id": h.consumers,
            "topic": h.topics, "topics": h.topics, "partitions": h.topics,
            "entry_id": h.entries, "transaction_key": h.keys,
        }
        pool = pools.get(name)
        if pool and rng.random() < 0.6:
            return rng.choice(pool)
        if name in ("most_bits", "least_bits") and h.txns and rng.random() < 0.6:
            most, least = rng.choice(h.txns)
            return most if name == "most_bits" else least
        return None

    def scalar(self, fd: FieldDescriptor):
        rng = self.rng
        named = self._named(fd.name)
        if named is not None:
            return named
        if fd.type in (T.TYPE_UINT64, T.TYPE_FIXED64):
            return rng.choice(UINTS) if rng.random() < 0.8 else rng.getrandbits(64)
        if fd.type in (T.TYPE_UINT32, T.TYPE_FIXED32):
            return rng.choice([u for u in UINTS if u < 2**32])
        if fd.type in (T.TYPE_INT32, T.TYPE_SINT32, T.TYPE_SFIXED32):
            return rng.choice(BATCH_INDEXES if fd.name == "batch_index" else INT32S)
        if fd.type in (T.TYPE_INT64, T.TYPE_SINT64, T.TYPE_SFIXED64):
            return rng.choice(INT64S)
        if fd.type == T.TYPE_BOOL:
            return rng.random() < 0.5
        if fd.type == T.TYPE_ENUM:
            numbers = [v.number for v in fd.enum_type.values]
            return rng.choice(numbers + [max(numbers) + 1, 99, -1])
        if fd.type == T.TYPE_STRING:
            return rng.choice(STRINGS)
        if fd.type == T.TYPE_BYTES:
            if fd.name == "batch" and rng.random() < 0.6:
                return valid_batch(rng, rng.choice(UINTS[:7] + [2**63 - 5]), rng.randint(1, 5))
            return rng.randbytes(rng.choice([0, 1, 8, 64, 512]))
        if fd.type in (T.TYPE_DOUBLE, T.TYPE_FLOAT):
            return rng.choice([0.0, -1.0, 1e308, float("nan")])
        raise AssertionError(f"no generator for {fd.full_name}")

    def fill(self, msg: Message, field_fd: FieldDescriptor) -> None:
        """Set ``field_fd`` of ``msg`` to a random value (any label, any type)."""
        rng = self.rng
        target = getattr(msg, field_fd.name)
        if field_fd.type == T.TYPE_MESSAGE and field_fd.message_type.GetOptions().map_entry:
            for _ in range(rng.randint(0, 3)):
                target[rng.choice(STRINGS)] = rng.choice(STRINGS)
            return
        if field_fd.is_repeated:
            del target[:]
            for _ in range(rng.choice([0, 1, 2, 5, MAX_REPEATED])):
                if field_fd.type == T.TYPE_MESSAGE:
                    self.random_into(target.add())
                else:
                    target.append(self.scalar(field_fd))
            return
        if field_fd.type == T.TYPE_MESSAGE:
            self.random_into(target)
            return
        try:
            setattr(msg, field_fd.name, self.scalar(field_fd))
        except (ValueError, TypeError):  # e.g. -1 into an enum field of an old runtime
            pass

    def random_into(self, msg: Message) -> None:
        for fd in msg.DESCRIPTOR.fields:
            if self.rng.random() < 0.8:
                self.fill(msg, fd)

    # ------------------------------------------------------------ requests

    def random(self, request_type: type[Message]) -> bytes:
        msg = request_type()
        self.random_into(msg)
        return msg.SerializeToString()

    def mutated(self, template: Message) -> bytes:
        msg = type(template)()
        msg.CopyFrom(template)
        fields = list(msg.DESCRIPTOR.fields)
        if fields:
            for fd in self.rng.sample(fields, min(len(fields), self.rng.randint(1, 3))):
                self.fill(msg, fd)
        return msg.SerializeToString()

    def garbage(self, template: Message) -> bytes:
        rng = self.rng
        valid = template.SerializeToString()
        choice = rng.randrange(3)
        if choice == 0 or not valid:
            return rng.randbytes(rng.choice([1, 3, 17, 200]))
        if choice == 1:
            return valid[:rng.randrange(len(valid))]
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)


def templates(h: Harvest, rng: random.Random) -> dict[type[Message], Message]:
    """A plausible, valid request of each type, built from harvested ids."""
    topic = h.topics[0] if h.topics else "persistent://public/default/fuzz"
    session = h.sessions[0] if h.sessions else ""
    producer = h.producers[0] if h.producers else 1
    consumer = h.consumers[0] if h.consumers else 1
    txn = pb.TxnId(most_bits=h.txns[0][0], least_bits=h.txns[0][1]) if h.txns else pb.TxnId()
    entry = h.entries[0] if h.entries else 0
    position = pb.Position(entry_id=entry, batch_index=-1)
    sub = pb.TxnSubscription(topic=topic, subscription="fuzz-sub")
    send = pb.SendRequest(session_id=session, producer_id=producer, batch=valid_batch(rng, 10**6, 2), num_messages=2,
                          sequence_id=10**6, highest_sequence_id=10**6 + 1)
    out = [
        pb.PartitionMetadataRequest(topic=topic), pb.LookupRequest(topic=topic),
        pb.OpenSessionRequest(client_name="fuzz"), pb.KeepAliveRequest(session_id=session),
        pb.CloseSessionRequest(session_id=session),
        pb.CreateProducerRequest(session_id=session, topic=topic, producer_name="fuzz-p"),
        send, pb.SendBatchesRequest(batches=[send, send]),
        pb.CloseProducerRequest(producer_id=producer),
        pb.SubscribeRequest(session_id=session, topic=topic, subscription="fuzz-sub", durable=True),
        pb.FetchRequest(consumer_id=consumer, max_messages=10, wait_ms=10),
        pb.AckRequest(consumer_id=consumer, positions=[position]),
        pb.RedeliverRequest(consumer_id=consumer, positions=[position]),
        pb.SeekRequest(consumer_id=consumer, position=position),
        pb.LastMessageIdRequest(consumer_id=consumer),
        pb.CloseConsumerRequest(consumer_id=consumer),
        pb.LookupCoordinatorsRequest(), pb.LookupRegistryRequest(),
        pb.EndTxnOnPartitionRequest(topic=topic, txn=txn, action=pb.TXN_ABORT),
        pb.EndTxnOnSubscriptionRequest(topic=topic, subscription="fuzz-sub", txn=txn, action=pb.TXN_ABORT),
        pb.EndTxnOnParticipantsRequest(txn=txn, action=pb.TXN_ABORT, partitions=[topic], subscriptions=[sub]),
        pb.NewTxnRequest(timeout_ms=5000, client_name="fuzz"),
        pb.AddPartitionToTxnRequest(txn=txn, topics=[topic]),
        pb.AddSubscriptionToTxnRequest(txn=txn, subscriptions=[sub]),
        pb.AddParticipantsToTxnRequest(txn=txn, topics=[topic], subscriptions=[sub]),
        pb.EndTxnRequest(txn=txn, action=pb.TXN_ABORT), pb.TxnStatusRequest(txn=txn),
        pb.ConnectKeyRequest(transaction_key="fuzz-key", epoch=-1),
        pb.DeleteKeyRequest(transaction_key="fuzz-key"),
    ]
    for m in out:  # per-object requests name the session their ids are bound to
        if "session_id" in m.DESCRIPTOR.fields_by_name and not m.session_id:
            m.session_id = session
    return {type(m): m for m in out}


@dataclass
class Call:
    kind: str            # broker, coordinator, registry
    path: str
    body: bytes
    token: int           # index into the fuzzer's tokens (one may be None: no token)


def plan(seed: int, count: int, routes, harvests: list[Harvest], tokens: int) -> list[Call]:
    """``count`` calls, a pure function of the arguments."""
    rng = random.Random(seed)
    flat = [(kind, path, rtype) for kind, paths in sorted(routes.items()) for path, rtype in paths]
    calls: list[Call] = []
    while len(calls) < count:
        kind, path, rtype = rng.choice(flat)
        harvest = rng.choice(harvests)  # this role's ids or another role's
        gen = Generator(rng, harvest)
        template = templates(harvest, rng).get(rtype) or rtype()
        style = rng.randrange(4)
        if style == 0:
            body = gen.random(rtype)
        elif style == 1:
            body = gen.mutated(template)
        elif style == 2:
            body = gen.garbage(template)
        else:  # a /v1/batch of several calls of this service
            same = [(p, t) for k, p, t in flat if k == kind]
            batch = pb.BatchRequest()
            for _ in range(rng.randint(1, 6)):
                p, t = rng.choice(same)
                t_template = templates(harvest, rng).get(t) or t()
                b = gen.mutated(t_template) if rng.random() < 0.7 else gen.garbage(t_template)
                batch.calls.add(path=rng.choice([p, p, p, "/v1/nowhere", "/v1/batch"]), body=b)
            path, body = "/v1/batch", batch.SerializeToString()
        calls.append(Call(kind, path, body, rng.randrange(tokens)))
    return calls


@dataclass
class Outcome:
    by_status: collections.Counter = field(default_factory=collections.Counter)
    by_route: collections.Counter = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)   # 5xx, hangs, refused connections
    sent: int = 0

    def add(self, other: "Outcome") -> None:
        self.by_status.update(other.by_status)
        self.by_route.update(other.by_route)
        self.failures += other.failures
        self.sent += other.sent

    def summary(self) -> str:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_status.items(), key=str))
        return f"{self.sent} requests sent; by status: {statuses}"


async def run(calls: list[Call], urls: dict[str, list[str]], tokens: list[str | None], *,
              concurrency: int = 16, deadline_s: float = 10.0,
              stop: asyncio.Event | None = None, max_failures: int = 20) -> Outcome:
    """Send every call (to a random instance of its service, from a seeded choice) and
    classify the answers.  A 5xx, no answer within ``deadline_s`` or a refused
    connection is a failure, recorded with what replays it; after ``max_failures`` the
    rest is not sent (a hung service would otherwise cost a deadline per request)."""
    outcome = Outcome()
    queue = collections.deque(enumerate(calls))
    chooser = random.Random(len(calls))
    targets = [chooser.choice(urls[c.kind]) for c in calls]
    timeout = aiohttp.ClientTimeout(total=deadline_s)

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue and not (stop and stop.is_set()) and len(outcome.failures) < max_failures:
            i, call = queue.popleft()
            headers = {"content-type": PROTOBUF}
            if tokens[call.token]:
                headers["authorization"] = f"Bearer {tokens[call.token]}"
            replay = f"#{i} POST {targets[i]}{call.path} token#{call.token} body={call.body.hex()}"
            outcome.sent += 1
            try:
                async with session.post(targets[i] + call.path, data=call.body,
                                        headers=headers) as resp:
                    answer = await resp.read()
                    status = resp.status
            except asyncio.TimeoutError:
                outcome.by_status["hang"] += 1
                outcome.failures.append(f"no answer within {deadline_s} s: {replay}")
                continue
            except aiohttp.ClientError as exc:
                outcome.by_status["connection error"] += 1
                outcome.failures.append(f"{type(exc).__name__}: {exc}: {replay}")
                continue
            outcome.by_status[status] += 1
            outcome.by_route[call.path] += 1
            if status >= 500:
                reason = answer[:300]
                try:
                    reason = pb.Error.FromString(answer).message[:300]
                except Exception:  # noqa: BLE001 (a non-protobuf 500 page: shown raw)
                    pass
                outcome.failures.append(f"{status} {reason!r}: {replay}")
            elif status == 200 and call.path == "/v1/batch":
                for result in pb.BatchResponse.FromString(answer).results:
                    outcome.by_status[f"batched {result.status}"] += 1
                    if result.status >= 500:
                        outcome.failures.append(f"batched call {result.status} "
                                                f"{pb.Error.FromString(result.body).message[:300]!r}: {replay}")

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return outcome


# ---------------------------------------------------------------- harvesting real ids

async def _call(session, url: str, path: str, msg: Message, reply_type, token: str | None):
    headers = {"content-type": PROTOBUF}
    if token:
        headers["authorization"] = f"Bearer {token}"
    async with session.post(url + path, data=msg.SerializeToString(), headers=headers) as resp:
        body = await resp.read()
        if resp.status != 200:
            return None
        return reply_type.FromString(body)


async def harvest(urls: dict[str, list[str]], token: str | None, name: str) -> Harvest:
    """Open a session, a producer (one batch sent), a consumer and a transaction as the
    token's role; whatever the role may not do is simply missing from the harvest."""
    h = Harvest(keys=[f"fuzz-key-{name}"])
    topic = f"persistent://public/default/fuzz-{name}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        broker = urls["broker"][0]
        meta = await _call(s, broker, "/v1/topics/metadata", pb.PartitionMetadataRequest(topic=topic),
                           pb.PartitionMetadataResponse, token)
        if meta is None:
            return h
        h.topics.append(meta.topic)
        found = await _call(s, broker, "/v1/topics/lookup", pb.LookupRequest(topic=meta.topic),
                            pb.LookupResponse, token)
        owner = found.broker_url if found else broker
        opened = await _call(s, owner, "/v1/sessions/open", pb.OpenSessionRequest(client_name=name),
                             pb.OpenSessionResponse, token)
        if opened is None:
            return h
        h.sessions.append(opened.session_id)
        made = await _call(s, owner, "/v1/producers/create", pb.CreateProducerRequest(
            session_id=opened.session_id, topic=meta.topic), pb.CreateProducerResponse, token)
        if made is not None:
            h.producers.append(made.producer_id)
            sent = await _call(s, owner, "/v1/producers/send", pb.SendRequest(
                session_id=opened.session_id, producer_id=made.producer_id,
                batch=valid_batch(random.Random(0), 0, 3), num_messages=3,
                sequence_id=0, highest_sequence_id=2), pb.SendResponse, token)
            if sent is not None:
                h.entries.append(sent.entry_id)
        sub = await _call(s, owner, "/v1/consumers/subscribe", pb.SubscribeRequest(
            session_id=opened.session_id, topic=meta.topic, subscription="fuzz-sub", durable=True,
            initial_position=pb.INITIAL_EARLIEST), pb.SubscribeResponse, token)
        if sub is not None:
            h.consumers.append(sub.consumer_id)
        for url in urls["coordinator"][:1]:
            new = await _call(s, url, "/v1/txn/new", pb.NewTxnRequest(timeout_ms=600_000, client_name=name),
                              pb.NewTxnResponse, token)
            if new is not None:
                h.txns.append((new.txn.most_bits, new.txn.least_bits))
                await _call(s, url, "/v1/txn/add-partitions", pb.AddPartitionToTxnRequest(
                    txn=new.txn, topics=[meta.topic]), pb.AddPartitionToTxnResponse, token)
    return h


def describe(outcome: Outcome, seed: int, elapsed: float) -> str:
    top = ", ".join(f"{p} {n}" for p, n in outcome.by_route.most_common(6))
    return (f"protobuf fuzz seed={seed}: {outcome.summary()} in {elapsed:.1f} s "
            f"({outcome.sent / max(elapsed, 1e-9):.0f}/s); busiest routes: {top}")


def now() -> float:
    return time.perf_counter()
