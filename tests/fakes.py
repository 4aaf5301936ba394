"""Scripted brokers for the admin client's tests: small socket servers on 127.0.0.1 that
speak the protocol with our own codecs, play Apache Kafka's KIP-345 behaviour and inject
faults, from polite ones (moving or loading coordinators, dropped, reset, slow and silent
connections) to hostile ones (raw bytes, drips, made-up sizes).

Use from a test module with `from fakes import scripted` (a fixture) and the answer functions.
"""

import asyncio
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from sasl_server import Refused

import fastkwire
from fastkwire import (
    ApiVersionsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    decode_request,
    encode_response,
)
from fastkwire.admin import AdminClient

API_VERSIONS, FIND_COORDINATOR, LEAVE_GROUP = 18, 10, 13
DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE, SASL_HANDSHAKE, SASL_AUTHENTICATE = 15, 69, 17, 36
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 16, 15, 14
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID = 25, 82

# What a current Apache Kafka broker advertises for the APIs the admin client uses.
MODERN = {
    API_VERSIONS: (0, 4),
    FIND_COORDINATOR: (0, 6),
    LEAVE_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
}

# The directory holding the fastkwire this test run imports, for CLI subprocesses.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastkwire.__file__)))


# ---------------------------------------------------------------- steps


class Drop:
    """Send the first half of the answer, then close the connection."""

    def __init__(self, response):
        self.response = response


class Delay:
    """Answer after `seconds`."""

    def __init__(self, seconds, response):
        self.seconds, self.response = seconds, response


class Raw:
    """Send these bytes instead of an answer and keep the connection open.

    `data` is bytes, or a function (correlation_id) -> bytes.
    """

    def __init__(self, data):
        self.data = data


class Drip:
    """Send the answer one byte per TCP segment, `interval` seconds apart.

    `stop_after` bytes are sent at most (then the connection stays open and silent).
    The client may give up halfway: the drip then ends quietly.
    """

    def __init__(self, response, interval=0.0, stop_after=None):
        self.response, self.interval, self.stop_after = response, interval, stop_after


RESET = "reset"  # close with an RST instead of an answer
CLOSE = "close"  # close without answering
SILENT = "silent"  # read the request, never answer
GARBAGE = "garbage"  # a well-sized frame that no codec can read
WRONG_CORRELATION = "wrong-correlation"


# ---------------------------------------------------------------- the broker


class ScriptedBroker:
    """A broker on 127.0.0.1 whose answers come from `script`.

    `script[api_key]` is a list of steps used in order (the last one repeats); a step is a
    function (request, version) -> response message, or one of the fault markers above
    (Drop, Delay and Drip wrap a function). ApiVersions is answered from `versions` unless
    the script says otherwise; a version above the broker's ApiVersions range gets Kafka's
    v0 UNSUPPORTED_VERSION answer. Every request is recorded in `requests`.
    """

    def __init__(
        self, versions=None, script=None, node_id=1, sasl=None, session_lifetime_ms=0, tls=None
    ):
        """sasl: a sasl_server.SaslServer: the listener then requires SASL before any request
        but ApiVersions (and closes the connection otherwise, as Kafka does), grants sessions
        of `session_lifetime_ms` and closes a connection used after its session expired.
        tls: an ssl server context: the listener speaks TLS."""
        self.versions = dict(MODERN if versions is None else versions)
        if sasl is not None and versions is None:
            self.versions.update({SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)})
        self.sasl, self.session_lifetime_ms, self.tls = sasl, session_lifetime_ms, tls
        self.sasl_events = []  # "handshake MECH", "authenticated", "refused", "expired", "unauthenticated"
        self.tls_errors = []  # handshakes that failed (a client that refused our certificate)
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.node_id = node_id
        self.requests = []  # (api_key, version, request message)
        self.errors = []  # exceptions raised inside the server threads
        self.connections = 0
        self._open = set()  # accepted sockets, shut down by close() to wake their threads
        self._stop = threading.Event()
        self._threads = []
        self._lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._spawn(self._accept_loop)

    def _spawn(self, target, *args):
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            with self._lock:
                self.connections += 1
                self._open.add(conn)
            self._spawn(self._serve, conn)

    def _recv_exact(self, conn, n):
        data = b""
        while len(data) < n and not self._stop.is_set():
            try:
                chunk = conn.recv(n - len(data))
            except socket.timeout:
                continue
            except ConnectionError:
                # The client went away: a reset, or (TLS, OpenSSL 3.6) EPIPE from the session
                # tickets OpenSSL writes during this read.
                return None
            if not chunk:
                return None
            data += chunk
        return data if len(data) == n else None

    def _serve(self, conn):
        try:
            if self.tls is not None:
                conn = self._wrap(conn)
                if conn is None:
                    return
            conn.settimeout(0.05)
            session = {"sasl": None, "raw": False, "until": None if self.sasl is None else 0.0}
            while not self._stop.is_set():
                size = self._recv_exact(conn, 4)
                if size is None:
                    return
                body = self._recv_exact(conn, struct.unpack(">i", size)[0])
                if body is None:
                    return
                if session["raw"]:  # a SASL token after a SaslHandshake v0
                    if not self._raw_sasl(conn, session, body):
                        return
                    continue
                header, request = decode_request(size + body)
                key, version = header.request_api_key, header.request_api_version
                with self._lock:
                    self.requests.append((key, version, request))
                if (
                    self.sasl is not None
                    and key in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
                    and key not in self.script
                ):
                    if not self._sasl(conn, session, header, key, version, request):
                        return
                    continue
                if (
                    self.sasl is not None
                    and key not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)
                    and not self._session_valid(session)
                ):
                    return
                if not self._answer(conn, header, key, version, request):
                    return
        except Exception as exc:  # noqa: BLE001 - reported by the fixture
            self.errors.append(exc)
        finally:
            if conn is not None:
                with self._lock:
                    self._open.discard(conn)
                conn.close()

    def _wrap(self, conn):
        import ssl

        conn.settimeout(5)
        with self._lock:
            self._open.discard(conn)
        try:
            wrapped = self.tls.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.tls_errors.append(exc)
            conn.close()
            return None
        with self._lock:
            self._open.add(wrapped)
        return wrapped

    def _session_valid(self, session):
        if session["until"] is None:
            return True
        if session["until"] == 0.0:
            self.sasl_events.append("unauthenticated")
            return False
        if time.monotonic() > session["until"]:
            self.sasl_events.append("expired")
            return False
        return True

    def _sasl(self, conn, session, header, key, version, request):
        """SaslHandshake and SaslAuthenticate; False when the connection is to end."""
        cid = header.correlation_id
        if key == SASL_HANDSHAKE:
            self.sasl_events.append(f"handshake {request.mechanism}")
            offered = self.sasl.mechanisms
            if request.mechanism not in offered:
                conn.sendall(
                    encode_response(
                        SaslHandshakeResponse(error_code=33, mechanisms=self.sasl.listed),
                        version,
                        cid,
                    )
                )
                return True
            session["sasl"] = self.sasl.session(request.mechanism)
            session["raw"] = version == 0
            answer = SaslHandshakeResponse(mechanisms=self.sasl.listed)
            conn.sendall(encode_response(answer, version, cid))
            return True
        try:
            reply, done = session["sasl"].step(request.auth_bytes)
        except Refused as exc:
            self.sasl_events.append("refused")
            conn.sendall(
                encode_response(
                    SaslAuthenticateResponse(error_code=58, error_message=str(exc)), version, cid
                )
            )
            return False
        lifetime = 0
        if done:
            self._authenticated(session)
            lifetime = self.session_lifetime_ms
        conn.sendall(
            encode_response(
                SaslAuthenticateResponse(auth_bytes=reply, session_lifetime_ms=lifetime),
                version,
                cid,
            )
        )
        return True

    def _raw_sasl(self, conn, session, token):
        try:
            reply, done = session["sasl"].step(token)
        except Refused:
            self.sasl_events.append("refused")
            return False  # after a v0 handshake a refusal is a closed connection
        if done:
            self._authenticated(session)
            session["raw"] = False
        conn.sendall(struct.pack(">i", len(reply)) + reply)
        return True

    def _authenticated(self, session):
        self.sasl_events.append("authenticated")
        lifetime = self.session_lifetime_ms
        session["until"] = time.monotonic() + lifetime / 1000 if lifetime else None

    def _next_step(self, key, request, version):
        with self._lock:
            steps = self.script.get(key)
            if steps:
                return steps.pop(0) if len(steps) > 1 else steps[0]
        if key == API_VERSIONS:
            return self._api_versions
        raise AssertionError(f"the script has no answer for API {key} v{version}")

    def _api_versions(self, request, version):
        return ApiVersionsResponse(
            api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.versions.items())
            ]
        )

    def _answer(self, conn, header, key, version, request):
        """Send the scripted answer; False when the connection is to end."""
        correlation_id = header.correlation_id
        if key == API_VERSIONS and version > self.versions.get(API_VERSIONS, (0, 0))[1]:
            # Kafka answers an ApiVersions version it lacks in v0, with its own range.
            response = self._api_versions(request, 0)
            response.error_code = 35
            conn.sendall(encode_response(response, 0, correlation_id))
            return True
        step = self._next_step(key, request, version)
        if step == SILENT:
            while not self._stop.wait(0.05):
                pass
            return False
        if step == CLOSE:
            return False
        if step == RESET:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if step == GARBAGE:
            conn.sendall(struct.pack(">ii", 7, correlation_id) + b"\xff\xff\xff")
            return True
        if step == WRONG_CORRELATION:
            response = self._next_step(key, request, version)(request, version)
            conn.sendall(encode_response(response, version, correlation_id + 1000))
            return True
        if isinstance(step, Raw):
            data = step.data(correlation_id) if callable(step.data) else step.data
            return self._send_quietly(conn, data)
        if isinstance(step, Drip):
            return self._drip(
                conn,
                encode_response(step.response(request, version), version, correlation_id),
                step,
            )
        if isinstance(step, Drop):
            frame = encode_response(step.response(request, version), version, correlation_id)
            conn.sendall(frame[: len(frame) // 2])
            return False
        if isinstance(step, Delay):
            if self._stop.wait(step.seconds):
                return False
            step = step.response
        conn.sendall(encode_response(step(request, version), version, correlation_id))
        return True

    def _send_quietly(self, conn, data):
        # A hostile answer often makes the client hang up first: that is not a failure here.
        try:
            conn.sendall(data)
        except OSError:
            return False
        return True

    def _drip(self, conn, frame, drip):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(frame) if drip.stop_after is None else min(drip.stop_after, len(frame))):
            if not self._send_quietly(conn, frame[i : i + 1]):
                return False
            if drip.interval and self._stop.wait(drip.interval):
                return False
        return True

    def seen(self, key):
        """(version, request) of every request with this API key, in order."""
        with self._lock:
            return [(v, r) for k, v, r in self.requests if k == key]

    def close(self):
        self._stop.set()
        with self._lock:
            for conn in self._open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv at once
                except OSError:
                    pass
        try:
            self.listener.shutdown(
                socket.SHUT_RDWR
            )  # wakes accept() on Linux; elsewhere its timeout does
        except OSError:
            pass
        self.listener.close()
        for t in self._threads:
            t.join(2)


@pytest.fixture
def scripted():
    """Factory for scripted brokers; stops them and checks that they ran cleanly."""
    brokers = []

    def make(**kwargs):
        broker = ScriptedBroker(**kwargs)
        brokers.append(broker)
        return broker

    yield make
    for b in brokers:
        b.close()
    for b in brokers:
        assert not b.errors, f"scripted broker {b.address} failed: {b.errors!r}"


# ---------------------------------------------------------------- answers


def coordinator_at(broker_or_port, error=0, node_id=1, host="127.0.0.1", error_message=None):
    """A FindCoordinator step naming host:port, in the form the version needs."""

    def step(request, version):
        port = broker_or_port if isinstance(broker_or_port, int) else broker_or_port.port
        if version >= 4:
            return FindCoordinatorResponse(
                coordinators=[
                    FindCoordinatorResponse.Coordinator(
                        key=k,
                        node_id=node_id,
                        host=host,
                        port=port,
                        error_code=error,
                        error_message=error_message,
                    )
                    for k in request.coordinator_keys
                ]
            )
        return FindCoordinatorResponse(
            error_code=error, node_id=node_id, host=host, port=port, error_message=error_message
        )

    return step


def find_error(error, error_message=None):
    return coordinator_at(0, error=error, node_id=-1, error_message=error_message)


class KafkaLikeGroup:
    """Apache Kafka's static-member leave (KIP-345): an empty member id plus a known
    group.instance.id removes that member; an unknown instance id is UNKNOWN_MEMBER_ID; a
    member id that does not match the instance's is FENCED_INSTANCE_ID."""

    def __init__(self, instance_ids):
        self.static = {i: f"{i}-{n:04d}" for n, i in enumerate(instance_ids)}

    def __call__(self, request, version):
        answers = []
        for m in request.members:
            current = self.static.get(m.group_instance_id)
            if current is None:
                code = UNKNOWN_MEMBER_ID
            elif m.member_id not in ("", current):
                code = FENCED_INSTANCE_ID
            else:
                code = 0
                del self.static[m.group_instance_id]
            answers.append(
                LeaveGroupResponse.MemberResponse(
                    member_id=m.member_id or (current or ""),
                    group_instance_id=m.group_instance_id,
                    error_code=code,
                )
            )
        return LeaveGroupResponse(members=answers)


def described(
    members, state="Stable", protocol_type="consumer", protocol="range", error=0, group_id=None
):
    """A DescribeGroups step; `members` are (member_id, instance_id, {topic: partitions}) or
    (member_id, instance_id, raw assignment bytes)."""
    from fastkwire.consumer_protocol import encode_assignment

    def step(request, version):
        return DescribeGroupsResponse(
            groups=[
                DescribeGroupsResponse.DescribedGroup(
                    error_code=error,
                    group_id=group_id or request.groups[0],
                    group_state=state,
                    protocol_type=protocol_type,
                    protocol_data=protocol,
                    members=[
                        DescribeGroupsResponse.DescribedGroupMember(
                            member_id=m,
                            group_instance_id=i,
                            client_id=f"client-{m}",
                            client_host=f"/10.0.0.{n}",
                            member_metadata=b"",
                            member_assignment=a if isinstance(a, bytes) else encode_assignment(a),
                        )
                        for n, (m, i, a) in enumerate(members)
                    ],
                )
            ]
        )

    return step


def consumer_group_described(members, state="Stable", assignor="uniform", error=0):
    """A ConsumerGroupDescribe step (KIP-848 groups); members are (member_id, instance_id, {topic: parts})."""
    from fastkwire import ConsumerGroupDescribeResponse as R

    def step(request, version):
        return R(
            groups=[
                R.DescribedGroup(
                    error_code=error,
                    group_id=request.group_ids[0],
                    group_state=state,
                    assignor_name=assignor,
                    members=[
                        R.Member(
                            member_id=m,
                            instance_id=i,
                            client_id=f"client-{m}",
                            client_host="/10.1.0.1",
                            assignment=R.Assignment(
                                topic_partitions=[
                                    R.TopicPartitions(topic_name=t, partitions=p)
                                    for t, p in a.items()
                                ]
                            ),
                        )
                        for m, i, a in members
                    ],
                )
            ]
        )

    return step


class DescribedKafkaGroup(KafkaLikeGroup):
    """KafkaLikeGroup that also answers DescribeGroups with its members (as `describe`), and
    removes a member named by its member id too."""

    def __init__(self, instance_ids, dynamic=()):
        super().__init__(instance_ids)
        self.dynamic = list(dynamic)

    def __call__(self, request, version):
        named = [m for m in request.members if m.group_instance_id is None]
        answers = (
            super()
            .__call__(
                LeaveGroupRequest(
                    members=[m for m in request.members if m.group_instance_id is not None]
                ),
                version,
            )
            .members
        )
        for m in named:
            code = 0 if m.member_id in self.dynamic else UNKNOWN_MEMBER_ID
            if code == 0:
                self.dynamic.remove(m.member_id)
            answers.append(
                LeaveGroupResponse.MemberResponse(member_id=m.member_id, error_code=code)
            )
        return LeaveGroupResponse(members=answers)

    def describe(self, request, version):
        members = [
            (member_id, instance_id, {"orders": [n]})
            for n, (instance_id, member_id) in enumerate(sorted(self.static.items()))
        ]
        members += [
            (member_id, None, {"orders": [100 + n]}) for n, member_id in enumerate(self.dynamic)
        ]
        return described(members)(request, version)


def leave_error(code):
    return lambda request, version: LeaveGroupResponse(error_code=code)


class FakeClock:
    """A clock for the admin flows: its time moves only when a Sleep step sleeps, so a test of
    retries and backoffs runs at once, whatever its timeout (the flows read the time only
    from their deadline, and wait only in Sleep steps). `slept` lists every sleep."""

    def __init__(self):
        self.time = 1000.0
        self.slept = []

    def now(self):
        return self.time

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.time += seconds

    async def sleep_async(self, seconds):
        self.sleep(seconds)
        await asyncio.sleep(0)  # still let the loop run, as a real sleep would


def on_clock(admin_client, clock):
    """`admin_client` with its deadlines and backoffs on `clock` (a FakeClock)."""
    if clock is not None:
        admin_client._clock = clock
    return admin_client


def client(broker, timeout=5.0, clock=None, **kwargs):
    servers = broker if isinstance(broker, str) else broker.address
    return on_clock(
        AdminClient(
            servers, client_id="test-admin", request_timeout_ms=int(timeout * 1000), **kwargs
        ),
        clock,
    )


def one_coordinator(scripted, group_members=("a", "b", "c"), versions=None):
    """A broker that is its own group's coordinator, with a Kafka-like static group."""
    group = KafkaLikeGroup(group_members)
    broker = scripted(versions=versions)
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], LEAVE_GROUP: [group]}
    return broker, group


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args, timeout=10, text=True):
    """Run `python -m fastkwire.cli ARGS` in a subprocess (text=False: output as bytes)."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "fastkwire.cli", *args],
        capture_output=True,
        text=text,
        timeout=timeout,
        env=env,
    )


# ---------------------------------------------------------------- in the event loop


class LoopBroker:
    """A scripted broker served by asyncio in the test's own event loop (no threads), for
    tests that count threads. `script[api_key]` is a function (request, version) -> response;
    ApiVersions is answered from `versions`. Start with `await broker.start()`."""

    def __init__(self, script, versions=None):
        self.script = dict(script)
        self.versions = dict(MODERN if versions is None else versions)
        self.requests = []
        self.open_connections = 0

    async def start(self):
        import asyncio

        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        return self

    async def _serve(self, reader, writer):
        import asyncio

        self.open_connections += 1
        try:
            while True:
                size = await reader.readexactly(4)
                frame = size + await reader.readexactly(struct.unpack(">i", size)[0])
                header, request = decode_request(frame)
                key, version = header.request_api_key, header.request_api_version
                self.requests.append((key, version))
                answer = self.script.get(key)
                if answer is None and key == API_VERSIONS:

                    def answer(r, v):
                        return ApiVersionsResponse(
                            api_keys=[
                                ApiVersionsResponse.ApiVersion(
                                    api_key=k, min_version=lo, max_version=hi
                                )
                                for k, (lo, hi) in sorted(self.versions.items())
                            ]
                        )

                writer.write(
                    encode_response(answer(request, version), version, header.correlation_id)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_connections -= 1
            writer.close()

    async def close(self):
        self.server.close()
        await self.server.wait_closed()
