"""A TLS + SASL terminating gateway for tests: real clients speak SSL or SASL_SSL to it, and it
forwards their Kafka frames in plain text to a broker (Tansu, which serves plaintext only and
keeps no SCRAM credentials) that advertises the gateway's address, so clients come back
through it after Metadata and FindCoordinator.

TLS is Python's ssl module; SaslHandshake and SaslAuthenticate are answered here by
tests/sasl_server.py (PLAIN, SCRAM per RFC 5802/7677) and never reach the broker. While
`sasl_required` is set, a connection that sends anything but ApiVersions before it has
authenticated is closed, as a SASL listener does; cleared, the gateway is an SSL listener
(for new connections). It runs an asyncio loop on its own thread; 127.0.0.1 only.
"""

import asyncio
import socket
import struct
import threading

from fastkwire import (
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    decode_request,
    encode_response,
)

from sasl_server import Refused

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, SYNC_GROUP = 18, 17, 36, 14
MAX_FRAME = 64 * 1024 * 1024


class Gateway:
    def __init__(self, tls_context, sasl_server):
        self.tls_context = tls_context
        self.sasl = sasl_server
        self.sasl_required = True
        self.upstream_port = None  # set once the broker runs
        self.closed_unauthenticated = 0
        self.forwarded = []  # (api_key, version) of every request passed to the broker
        self.sync_groups = []  # SyncGroup request frames: the leader's assignments, as sent
        self.connections = 0
        self.errors = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]  # known before the broker starts
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-sasl-gateway", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the gateway did not start")

    def _run(self):
        asyncio.set_event_loop(self._loop)

        async def start():
            self._server = await asyncio.start_server(
                self._serve, sock=self._listener, ssl=self.tls_context
            )
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _serve(self, reader, writer):
        self.connections += 1
        up_writer = None
        pump = None
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            pump = asyncio.ensure_future(self._pump(up_reader, writer))
            await self._requests(reader, writer, up_writer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(repr(exc))
        finally:
            if pump is not None:
                pump.cancel()
            for w in (writer, up_writer):
                if w is not None:
                    w.transport.abort()

    async def _pump(self, up_reader, writer):
        """Broker -> client, a whole frame at a time (local SASL answers go between frames)."""
        try:
            while True:
                head = await up_reader.readexactly(4)
                writer.write(head + await up_reader.readexactly(struct.unpack(">i", head)[0]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            writer.transport.abort()

    async def _requests(self, reader, writer, up_writer):
        authenticated, session = not self.sasl_required, None
        while True:
            head = await reader.readexactly(4)
            size = struct.unpack(">i", head)[0]
            if not 0 <= size <= MAX_FRAME:
                return
            frame = head + await reader.readexactly(size)
            api_key, version = struct.unpack_from(">hh", frame, 4)
            if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and self.sasl_required:
                header, request = decode_request(frame)
                if api_key == SASL_HANDSHAKE:
                    offered = self.sasl.mechanisms
                    known = request.mechanism in offered
                    session = self.sasl.session(request.mechanism) if known else None
                    answer = SaslHandshakeResponse(
                        error_code=0 if known else 33, mechanisms=offered
                    )
                else:
                    try:
                        reply, done = session.step(request.auth_bytes)
                    except Refused as exc:
                        writer.write(
                            encode_response(
                                SaslAuthenticateResponse(error_code=58, error_message=str(exc)),
                                version,
                                header.correlation_id,
                            )
                        )
                        await writer.drain()
                        return
                    authenticated = authenticated or done
                    answer = SaslAuthenticateResponse(auth_bytes=reply)
                writer.write(encode_response(answer, version, header.correlation_id))
                await writer.drain()
                continue
            if not authenticated and api_key != API_VERSIONS:
                self.closed_unauthenticated += 1
                return
            self.forwarded.append((api_key, version))
            if api_key == SYNC_GROUP:
                self.sync_groups.append(frame)
            up_writer.write(frame)
            await up_writer.drain()

    def close(self):
        async def stop():
            self._server.close()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
