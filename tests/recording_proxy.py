"""A TCP proxy on 127.0.0.1 that records the Kafka frames passing through it.

Each accepted connection gets one upstream connection to the broker and two threads, one per
direction. A thread splits its byte stream into frames (int32 size prefix) and forwards the
bytes unchanged. Requests are recorded with their api key, version and correlation id (read
from the request header); a response is matched to its request by correlation id on the same
connection. Requests that get no response (Produce with acks=0) stay unmatched.
"""

import socket
import struct
import threading

MAX_FRAME = 64 * 1024 * 1024  # a larger size prefix means the stream is not Kafka
RECV_SIZE = 65536
POLL_INTERVAL = 0.5  # how often a waiting thread checks whether the proxy is closing


class Exchange:
    """One request and, once it arrives, its response."""

    __slots__ = (
        "label",
        "connection",
        "api_key",
        "version",
        "correlation_id",
        "request",
        "response",
    )

    def __init__(self, label, connection, api_key, version, correlation_id, request):
        self.label = label
        self.connection = connection
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.request = request
        self.response = None


def split_frames(buffer):
    """Complete frames at the front of `buffer` (a bytearray, consumed in place)."""
    frames = []
    while len(buffer) >= 4:
        size = struct.unpack_from(">i", buffer, 0)[0]
        if size < 0 or size > MAX_FRAME:
            raise ValueError(f"bad frame size {size}")
        if len(buffer) < 4 + size:
            break
        frames.append(bytes(buffer[: 4 + size]))
        del buffer[: 4 + size]
    return frames


class RecordingProxy:
    """Listens on a free 127.0.0.1 port (known before the broker starts, so that the broker
    can advertise it); forwards to 127.0.0.1:`upstream_port` once that is set."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.upstream_port = None
        self.label = "unlabelled"  # which client the next connections belong to
        self.exchanges = []
        self.unmatched_responses = []  # (label, frame): a correlation id no request had
        self.errors = []  # framing errors or broken streams, as text
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sockets = []
        self._threads = []
        self._connections = 0
        self._accept_thread = threading.Thread(
            target=self._accept, name="proxy-accept", daemon=True
        )
        self._accept_thread.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except (OSError, TypeError) as e:
                self._error(f"upstream connect: {e}")
                client.close()
                continue
            with self._lock:
                self._connections += 1
                connection = self._connections
                pending = {}  # correlation id -> Exchange, for this connection
                self._sockets += [client, upstream]
            for sock in (client, upstream):
                sock.settimeout(POLL_INTERVAL)
            for source, sink, is_request in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(
                    target=self._pump,
                    args=(source, sink, is_request, connection, pending),
                    name=f"proxy-{connection}-{'req' if is_request else 'resp'}",
                    daemon=True,
                )
                self._threads.append(t)
                t.start()

    def _error(self, text):
        with self._lock:
            self.errors.append(text)

    def _pump(self, source, sink, is_request, connection, pending):
        label = self.label
        buffer = bytearray()
        try:
            while not self._stop.is_set():
                try:
                    data = source.recv(RECV_SIZE)
                except socket.timeout:
                    continue
                if not data:
                    break
                buffer += data
                # Record before forwarding, so a response cannot overtake its request.
                for frame in split_frames(buffer):
                    self._record(frame, is_request, label, connection, pending)
                sink.sendall(data)
        except (OSError, ValueError) as e:
            if not self._stop.is_set() and not isinstance(
                e, (ConnectionResetError, BrokenPipeError)
            ):
                self._error(
                    f"connection {connection} ({label}) {'request' if is_request else 'response'}: {e!r}"
                )
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _record(self, frame, is_request, label, connection, pending):
        with self._lock:
            if is_request:
                if len(frame) < 12:
                    self.errors.append(f"short request frame {frame.hex()}")
                    return
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 4)
                exchange = Exchange(label, connection, api_key, version, correlation_id, frame)
                self.exchanges.append(exchange)
                pending[correlation_id] = exchange
            else:
                correlation_id = struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else None
                exchange = pending.pop(correlation_id, None)
                if exchange is None:
                    self.unmatched_responses.append((label, frame))
                else:
                    exchange.response = frame

    def snapshot(self):
        with self._lock:
            return list(self.exchanges)

    def close(self):
        self._stop.set()
        self.listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self._accept_thread.join(5)
        for t in self._threads:
            t.join(5)
