"""One Pulsar client connection: framing, CONNECT (version negotiation, token auth),
PING/PONG, error answers, and the routing of every other command to its role module
(discovery, producers, consumers).  One connection is one Magnetar session: its
producers and consumers belong to it and go when it closes, as over HTTP.

Every command becomes the same call the HTTP route makes (``BrokerService`` methods
with the same protobuf requests), under the connection's role, so dedup, fencing,
dispatch and acks have one implementation (docs/design.md §8)."""

from __future__ import annotations

import asyncio
import logging
import time

from magnetar_broker.pulsar.errors import error_frame, failure
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import AuthenticationError, MagnetarError
from magnetar_protocol.pulsar import frames
from magnetar_runtime.auth import set_role
from magnetar_runtime.roles import ANONYMOUS
from magnetar_runtime.tasks import TaskSet

log = logging.getLogger("magnetar.broker.pulsar")

Type = pb.BaseCommand.Type
# The newest protocol version this listener speaks (Pulsar 2.x/3.x/4.x brokers: 21).
SERVER_PROTOCOL_VERSION = 21
SERVER_VERSION = "Magnetar"
READ_CHUNK = 256 * 1024
# A connection whose CONNECT was refused answers requests for this long, then closes.
REFUSED_GRACE_S = 10.0


# Refused commands whose answer type carries an error: (answer, error field, message field).
OWN_ERROR_ANSWER = {
    Type.CONSUMER_STATS: (pb.CommandConsumerStatsResponse, "error_code", "error_message"),
    Type.END_TXN_ON_PARTITION: (pb.CommandEndTxnOnPartitionResponse, "error", "message"),
    Type.END_TXN_ON_SUBSCRIPTION: (pb.CommandEndTxnOnSubscriptionResponse, "error", "message"),
}
NOT_SERVED_WHY = {
    Type.END_TXN_ON_PARTITION: ": Magnetar's coordinators end transactions on the brokers themselves",
    Type.END_TXN_ON_SUBSCRIPTION: ": Magnetar's coordinators end transactions on the brokers themselves",
    Type.WATCH_TOPIC_LIST: ": topic list watchers are not supported (CONNECTED does not offer them); "
                           "poll GET_TOPICS_OF_NAMESPACE",
}


class Closed(Exception):
    """Stop serving this connection; the message is the logged reason."""


class Connection:
    def __init__(self, service, settings, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handlers_factory) -> None:
        self.service = service
        self.settings = settings
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.decoder = frames.FrameDecoder(settings.max_message_size + frames.FRAME_PADDING)
        self.role = ANONYMOUS
        self.credentials: dict[str, str] = {}   # the client's token, for calls made on its behalf
        self.session_id = ""
        self.protocol_version = 0
        self.client_version = ""
        self.connected = False
        self.refused: MagnetarError | None = None   # the CONNECT's authentication failure
        self.last_heard = time.monotonic()
        self.tasks = TaskSet(f"pulsar connection {self.peer}", log)
        self._closers: list = []                # role modules' cleanup, run at close
        self.handlers = handlers_factory(self)   # Type -> async handler(frame)

    # ---------------------------------------------------------------- writing

    def send(self, sub_command, metadata=None, payload: bytes = b"") -> None:
        if not self.writer.is_closing():
            self.writer.write(frames.encode(sub_command, metadata, payload))

    def send_raw(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def error(self, request_id: int, exc: BaseException) -> None:
        self.send(error_frame(request_id, exc))

    def spawn(self, coro) -> asyncio.Task:
        """A task of this connection: cancelled when it closes, failures logged."""
        return self.tasks.spawn(coro)

    def on_close(self, closer) -> None:
        self._closers.append(closer)

    # ---------------------------------------------------------------- the loop

    async def serve(self) -> None:
        reason = "the client closed the connection"
        keepalive = None
        try:
            while True:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    try:
                        self.decoder.finish()
                    except frames.FrameError as exc:
                        reason = f"the client closed the connection inside a frame ({exc})"
                    break
                self.last_heard = time.monotonic()
                self.decoder.feed(data)
                while True:
                    try:
                        frame = self.decoder.next_frame()
                    except frames.FrameError as exc:
                        self._refuse(exc)
                        if exc.fatal:
                            raise Closed(f"unreadable frame: {exc}") from None
                        continue
                    if frame is None:
                        break
                    await self._dispatch(frame)
                    if keepalive is None and self.connected:
                        keepalive = self.spawn(self._keepalive())
                await self.writer.drain()
        except Closed as exc:
            reason = str(exc)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            reason = f"connection lost: {exc!r}"
        except asyncio.CancelledError:
            reason = "the broker is stopping"
            raise
        finally:
            await self._close(reason)

    def _refuse(self, exc: frames.FrameError) -> None:
        """Answer a frame the codec refused: SEND_ERROR for a SEND, else ERROR."""
        log.warning("pulsar connection %s: refused a frame: %s", self.peer, exc)
        cmd = exc.command
        if cmd is not None and cmd.type == Type.SEND and cmd.HasField("send"):
            self.send(pb.CommandSendError(producer_id=cmd.send.producer_id, sequence_id=cmd.send.sequence_id,
                                          error=exc.server_error, message=str(exc)))
            return
        request_id = 0
        if cmd is not None:
            body = getattr(cmd, frames._FIELD_OF_TYPE.get(cmd.type, ""), None)
            request_id = getattr(body, "request_id", 0) or 0
        self.send(pb.CommandError(request_id=request_id, error=exc.server_error, message=str(exc)))

    async def _dispatch(self, frame: frames.Frame) -> None:
        kind = frame.type
        if self.refused is not None:
            self._answer_refused(frame)
            return
        if kind == Type.CONNECT:
            await self._connect(frame.body)
            return
        if not self.connected:
            self.send(pb.CommandError(request_id=getattr(frame.body, "request_id", 0) or 0,
                                      error=pb.NotAllowedError,
                                      message="send CONNECT first"))
            raise Closed(f"{Type.Name(kind)} before CONNECT")
        if kind == Type.PING:
            self.send(pb.CommandPong())
            return
        if kind == Type.PONG:
            return
        handler = self.handlers.get(kind)
        if handler is None:
            self._not_served(frame)
            return
        await handler(frame)

    def _not_served(self, frame: frames.Frame) -> None:
        """A command this listener does not serve: refused at once, in the answer its
        client waits for (its own response type when that has error fields, else ERROR)
        with its request id, so the client fails now instead of at its operation timeout.
        A command with no request id (a client sending a broker's push) is logged only."""
        kind, body = frame.type, frame.body
        if "request_id" not in body.DESCRIPTOR.fields_by_name:
            log.warning("pulsar connection %s: ignored %s, which has no answer", self.peer, Type.Name(kind))
            return
        request_id: int = getattr(body, "request_id")  # noqa: B009 (a Message's field, checked above)
        message = (f"Magnetar does not serve {Type.Name(kind)}"
                   f"{NOT_SERVED_WHY.get(kind, '')} (docs/pulsar-protocol.md lists what it serves)")
        own = OWN_ERROR_ANSWER.get(kind)
        if own is None:
            self.send(pb.CommandError(request_id=request_id, error=pb.NotAllowedError, message=message))
            return
        answer_type, error_field, message_field = own
        self.send(answer_type(**{"request_id": request_id, error_field: pb.NotAllowedError,
                                 message_field: message}))

    # ---------------------------------------------------------------- CONNECT

    async def _connect(self, cmd: pb.CommandConnect) -> None:
        if self.connected:
            self.send(pb.CommandError(request_id=0, error=pb.NotAllowedError,
                                      message="this connection is already connected"))
            return
        try:
            self.role = self._authenticate(cmd)
        except MagnetarError as exc:
            self._refuse_connect(cmd, exc)
            return
        # The role holds for everything this connection's task (and its tasks) do.
        set_role(self.role)
        session = await self.service.open_session(cmd.client_version[:200])
        self.session_id = session.session_id
        self.protocol_version = min(cmd.protocol_version, SERVER_PROTOCOL_VERSION)
        self.client_version = cmd.client_version
        self.connected = True
        log.info("pulsar connection %s: %s connected as %r (protocol v%d)", self.peer, cmd.client_version,
                 self.role, self.protocol_version)
        self.send(pb.CommandConnected(server_version=SERVER_VERSION, protocol_version=self.protocol_version,
                                      max_message_size=self.settings.max_message_size,
                                      feature_flags=pb.FeatureFlags(supports_auth_refresh=False)))

    def _refuse_connect(self, cmd: pb.CommandConnect, exc: MagnetarError) -> None:
        """A CONNECT whose credentials fail.  Pulsar's broker answers it with
        ERROR(request_id -1, AuthenticationError) and closes; the C++ client under the
        ``pulsar-client`` wheel treats any answer but CONNECTED as a broken connection
        and retries until its operation timeout, so the user sees TimeOut, not the
        refusal (pulsar-client-cpp#227).  Here the CONNECT is answered CONNECTED with no
        session and no role, and every request on the connection is answered with the
        AuthenticationError in its own response type, which the wheel raises at once;
        the connection closes after the first such answer (or REFUSED_GRACE_S)."""
        log.warning("pulsar connection %s: CONNECT refused: %s", self.peer, exc.message)
        self.refused = exc
        self.protocol_version = min(cmd.protocol_version, SERVER_PROTOCOL_VERSION)
        self.send(pb.CommandConnected(server_version=SERVER_VERSION, protocol_version=self.protocol_version,
                                      max_message_size=self.settings.max_message_size))
        self.spawn(self._close_refused())

    async def _close_refused(self) -> None:
        await asyncio.sleep(REFUSED_GRACE_S)
        self.writer.close()

    def _answer_refused(self, frame: frames.Frame) -> None:
        """A request on a connection whose CONNECT was refused: its refusal, then close."""
        exc, kind, body = self.refused, frame.type, frame.body
        assert exc is not None  # answered only once a CONNECT was refused
        if kind == Type.PING:
            self.send(pb.CommandPong())
            return
        if kind == Type.PONG:
            return
        error, reason = failure(exc)  # the one mapping of this wire (pulsar/errors.py)
        message = f"CONNECT refused: {reason}"
        request_id = getattr(body, "request_id", 0) or 0
        if kind == Type.PARTITIONED_METADATA:
            Metadata = pb.CommandPartitionedTopicMetadataResponse
            self.send(Metadata(request_id=request_id, response=Metadata.Failed, error=error, message=message))
        elif kind == Type.LOOKUP:
            Lookup = pb.CommandLookupTopicResponse
            self.send(Lookup(request_id=request_id, response=Lookup.Failed, error=error, message=message))
        elif kind == Type.SEND:
            send = frame.command.send
            self.send(pb.CommandSendError(producer_id=send.producer_id, sequence_id=send.sequence_id,
                                          error=error, message=message))
        else:
            self.send(pb.CommandError(request_id=request_id, error=error, message=message))
        raise Closed(message)

    def _authenticate(self, cmd: pb.CommandConnect) -> str:
        """The role the CONNECT proves: a Magnetar JWT sent with method "token"."""
        auth = self.service.auth
        if not auth.enabled:
            return ANONYMOUS
        method = cmd.auth_method_name if cmd.HasField("auth_method_name") else ""
        if method != "token":
            raise AuthenticationError(
                f"authentication is required: connect with a token (auth_method_name 'token', "
                f"e.g. pulsar.AuthenticationToken(jwt)); got method {method or 'none'!r}")
        try:
            token = cmd.auth_data.decode()
        except UnicodeDecodeError:
            raise AuthenticationError("the token is not UTF-8 text") from None
        role = auth.role_of(f"Bearer {token}")
        # Coordinators check the role themselves (transactions.py forwards the token).
        self.credentials = {"authorization": f"Bearer {token}"}
        return role

    # ---------------------------------------------------------------- liveness

    async def _keepalive(self) -> None:
        """Keep the Magnetar session alive while the TCP connection is, PING the client
        and close it when it stays silent for two keep-alive periods."""
        interval = self.settings.keepalive_interval_ms / 1000
        period = self.settings.pulsar_keepalive_s
        last_ping = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            try:
                await self.service.keepalive(self.session_id)
            except MagnetarError as exc:
                log.warning("pulsar connection %s: session lost (%s); closing", self.peer, exc)
                self.writer.close()
                return
            if now - self.last_heard > 2 * period:
                log.warning("pulsar connection %s: nothing heard for %.0f s; closing", self.peer,
                            now - self.last_heard)
                self.writer.close()
                return
            if now - last_ping >= period:
                last_ping = now
                self.send(pb.CommandPing())

    async def _close(self, reason: str) -> None:
        log.info("pulsar connection %s closed: %s", self.peer, reason)
        for task in self.tasks:
            task.cancel()
        for closer in self._closers:
            try:
                closer()
            except Exception:  # cleanup must reach the session close
                log.exception("pulsar connection %s: cleanup failed", self.peer)
        if self.session_id:
            try:
                await self.service.close_session(self.session_id)
            except MagnetarError as exc:
                log.info("pulsar connection %s: closing its session: %s", self.peer, exc)
        self.writer.close()


async def answer(conn: Connection, request_id: int, call, on_success) -> None:
    """Run ``call()`` and send ``on_success(result)``, or an ERROR carrying the request id."""
    try:
        result = await call()
    except MagnetarError as exc:
        conn.error(request_id, exc)
        return
    except Exception as exc:  # a bug must not end the connection silently
        log.exception("pulsar connection %s: request %d failed", conn.peer, request_id)
        conn.error(request_id, exc)  # UnknownError with what it was (errors.failure)
        return
    reply = on_success(result)
    if reply is not None:   # None: on_success answered itself
        conn.send(reply)
