"""The caps a server puts on each connection and their defaults, shared by the proxy and the
broker, and the parsing of their arguments: a light module (the broker imports it without
the proxy's server)."""

MIB = 1024 * 1024
DEFAULT_MAX_FRAME_BYTES = 128 * MIB  # above Kafka's socket.request.max.bytes (100 MiB)
DEFAULT_MAX_PENDING_BYTES = 64 * MIB
DEFAULT_FRAME_TIMEOUT = 30.0  # seconds a started frame may take to arrive whole
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_MAX_BUFFERED_BYTES = 1024 * MIB  # frames held for all connections together


def parse_address(value, param):
    """(host, port) from "host:port" or a (host, port) pair; ValueError naming `param`."""
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        # ASCII digits only: str.isdigit() and int() also take "²" and other scripts' digits
        if not sep or not (port.isascii() and port.isdigit()):
            raise ValueError(f"{param}: {value!r} is not HOST:PORT")
        value = (host.strip("[]") or "127.0.0.1", int(port))
    try:
        host, port = value
    except (TypeError, ValueError):
        raise ValueError(f"{param}: {value!r} is not HOST:PORT") from None
    if not isinstance(host, str) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{param}: {value!r} is not a host and a port from 0 to 65535")
    try:  # as a socket takes a host: a TypeError at bind or connect otherwise
        if "\0" in host:
            raise UnicodeError("a NUL character")
        host.encode("idna")
    except UnicodeError as e:
        raise ValueError(f"{param}: {value!r}: the host cannot be a network name ({e})") from None
    return host, port


def _positive(value, param, kind=int):
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float) if kind is float else int)
        or not value > 0
    ):
        raise ValueError(
            f"{param}: must be a positive {'number' if kind is float else 'integer'}, not {value!r}"
        )
    return value


class PeerClock:
    """How long the frame being read has waited on its sender: only the time spent in a read
    while part of the frame was held counts, never the proxy's own waits (a delay rule,
    the other side's drain, a full pending queue). Plain state, driven by `_Side`."""

    __slots__ = ("partial", "waited", "since")

    def __init__(self):
        self.partial = False  # part of a frame is held
        self.waited = 0.0  # seconds waited on the peer for it, reads before this one
        self.since = None  # when the read now under way began, if one is

    def reading(self, now):
        if self.partial:
            self.since = now

    def read(self, now, completed, partial):
        """A read returned: `completed` frames ended in it, and part of one is held or not."""
        if self.since is not None:
            self.waited += now - self.since
            self.since = None
        if completed or not partial:  # the frame held now (if any) began in this read
            self.waited = 0.0
        self.partial = partial

    def pause(self, now):
        """The proxy stopped reading (its own wait): the time until it reads again does not count."""
        if self.since is not None:
            self.waited += now - self.since
            self.since = None

    def overdue(self, now, timeout):
        if not self.partial:
            return False
        current = 0.0 if self.since is None else now - self.since
        return self.waited + current > timeout
