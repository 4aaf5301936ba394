"""The proxy's JSON-lines captures (`--record`), written and read back.

One line per exchange: time (Unix seconds), conn, client, client_id, broker (the upstream
broker's host:port), api, api_key, version,
correlation_id, latency_ms, fault, local_answer, and both frames as hex (`request`,
`response`: null when none came; `upstream_response` too when the proxy rewrote it).
"""

import json
import warnings
from json import encoder

from ._exchange import Exchange
from ._frames import RequestHeader, request_header

_MISSING = object()
MAX_TIME = 253402300799  # the last second of year 9999, in Unix seconds
MAX_LATENCY_MS = 1e10  # about 116 days


class CaptureError(ValueError):
    """A capture that cannot be read; the message names the file and the line or offset."""


class CaptureWarning(UserWarning):
    """Part of a capture could not be read (cut short, a broken stream, unpaired frames);
    what could be read was."""


def record_of(ex, frames=True):
    """The JSON line's values of an exchange (without its frames when `frames` is false)."""
    d = {
        "time": ex.time,
        "conn": ex.conn,
        "client": ex.client,
        "client_id": ex.client_id,
        "broker": ex.broker,
        "api": ex.api,
        "api_key": ex.api_key,
        "version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "latency_ms": None if ex.latency_ms is None else round(ex.latency_ms, 3),
        "fault": ex.fault,
        "local_answer": ex.local,
        "expects_response": ex.expects_response,
    }
    if frames:
        d["request"] = ex.request.hex()
        d["response"] = None if ex.response is None else ex.response.hex()
        if ex.upstream_response is not None:
            d["upstream_response"] = ex.upstream_response.hex()
    return d


_ENCODE = json.JSONEncoder(check_circular=False).encode
_STR = encoder.encode_basestring_ascii  # json's own string encoder (C), as _ENCODE's


def _json_text(value):
    return "null" if value is None else _STR(value)


def _json_number(value):
    return "null" if value is None else repr(value)  # JSON's spelling of an int or a float


_FIXED = {}  # (conn, client, client_id, broker, api_key, version) -> their JSON
_FIXED_MAX = 4096  # entries kept before the cache starts again


def _fixed(ex):
    """The JSON of the fields an exchange shares with the others of its connection and API."""
    key = (ex.conn, ex.client, ex.client_id, ex.broker, ex.api_key, ex.api_version)
    text = _FIXED.get(key)
    if text is None:
        if len(_FIXED) >= _FIXED_MAX:
            _FIXED.clear()
        text = _FIXED[key] = (
            f'"conn": {_json_number(ex.conn)}, '
            f'"client": {_json_text(ex.client)}, "client_id": {_json_text(ex.client_id)}, '
            f'"broker": {_json_text(ex.broker)}, "api": {_STR(ex.api)}, '
            f'"api_key": {_json_number(ex.api_key)}, "version": {_json_number(ex.api_version)}, '
        )
    return text


def _head(ex):
    """record_of(ex, frames=False) as JSON, without its closing brace: what _ENCODE gives,
    formatted directly (a capture line per exchange, so its cost counts)."""
    latency = ex.latency_ms
    fault = ex.fault
    return (
        f'{{"time": {_json_number(ex.time)}, {_fixed(ex)}'
        f'"correlation_id": {_json_number(ex.correlation_id)}, '
        f'"latency_ms": {"null" if latency is None else repr(round(latency, 3))}, '
        f'"fault": {"null" if fault is None else _STR(fault)}, '
        f'"local_answer": {"true" if ex.local else "false"}, '
        f'"expects_response": {"true" if ex.expects_response else "false"}'
    )


HEX_CHUNK = 1 << 20  # frame bytes turned into hex at a time: a large frame is not copied whole


def unpaired_record(event):
    """The JSON line of a frame forwarded without being paired (a ProxyEvent with a frame)."""
    return {
        "time": event.time,
        "conn": event.conn,
        "client": event.client,
        "unpaired": "request" if event.from_client else "response",
        "why": event.text,
        "frame": event.frame.hex(),
    }


class CaptureWriter:
    """Writes one JSON line per exchange to `path` (a file name or a text file object); a
    frame forwarded without being paired is a line with `unpaired` ("request" or
    "response") and its `frame`. Frames go out as hex in pieces, never as one more copy of
    the whole frame."""

    def __init__(self, path):
        self._own = isinstance(path, (str, bytes)) or hasattr(path, "__fspath__")
        self._file = open(path, "w", encoding="utf-8") if self._own else path
        self.count = 0

    def write(self, ex):
        frames = [("request", ex.request), ("response", ex.response)]
        if ex.upstream_response is not None:
            frames.append(("upstream_response", ex.upstream_response))
        parts = [_head(ex)]  # the line in one write when its frames are small
        for key, frame in frames:
            if frame is None:
                parts.append(f', "{key}": null')
            elif len(frame) <= HEX_CHUNK:
                parts.append(f', "{key}": "{frame.hex()}"')
            else:
                self._file.write("".join(parts) + f', "{key}": "')
                view = memoryview(frame)
                for i in range(0, len(view), HEX_CHUNK):
                    self._file.write(view[i : i + HEX_CHUNK].hex())
                parts = ['"']
        parts.append("}\n")
        self._file.write("".join(parts))
        self.count += 1

    def write_unpaired(self, event):
        self._file.write(json.dumps(unpaired_record(event)) + "\n")

    def flush(self):
        self._file.flush()

    def close(self):
        if self._own:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _frame(d, key, where):
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise CaptureError(f"{where}: {key} is not hex text")
    if len(value) % 2:
        raise CaptureError(f"{where}: {key}: odd number of hex digits ({len(value)})")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise CaptureError(f"{where}: {key} is not hex") from None


def _int(d, key, where, low, high, default=_MISSING):
    value = d.get(key, default)
    if value is _MISSING:
        raise CaptureError(f"{where}: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CaptureError(
            f"{where}: {key}: {_shown(value)} is not an integer from {low} to {high}"
        )
    return value


def _number(d, key, where, high, default=_MISSING):
    value = d.get(key, default)
    if value is _MISSING:
        raise CaptureError(f"{where}: {key} is missing")
    if value is None and default is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value <= high  # refuses NaN too
    ):
        raise CaptureError(f"{where}: {key}: {_shown(value)} is not a number from 0 to {high:g}")
    return value


def _text(d, key, where, default=None):
    value = d.get(key, default)
    if value is not None and not isinstance(value, str):
        raise CaptureError(f"{where}: {key}: {_shown(value)} is not text")
    return value


def _shown(value, limit=40):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _exchange_of(d, where):
    if not isinstance(d, dict):
        raise CaptureError(f"{where}: not a JSON object")
    request = _frame(d, "request", where)
    if request is None:
        raise CaptureError(f"{where}: no request frame")
    header = request_header(request)
    if header is None:
        try:
            header = RequestHeader(
                _int(d, "api_key", where, -0x8000, 0x7FFF),
                _int(d, "version", where, -0x8000, 0x7FFF),
                _int(d, "correlation_id", where, -0x80000000, 0x7FFFFFFF),
                _text(d, "client_id", where),
                None,
            )
        except CaptureError as e:
            raise CaptureError(
                f"{where}: the request is too short for a header, and {str(e)[len(where) + 2 :]}"
            ) from None
    response = _frame(d, "response", where)
    latency = _number(d, "latency_ms", where, MAX_LATENCY_MS, None)
    if response is not None and latency is None:
        raise CaptureError(
            f"{where}: latency_ms: "
            + ("null" if "latency_ms" in d else "missing")
            + ", but the exchange has a response"
        )
    return Exchange.restore(
        _int(d, "conn", where, 0, 2**63, 0),
        _text(d, "client", where, "?"),
        request,
        response,
        _number(d, "time", where, MAX_TIME, 0),
        latency,
        header,
        fault=_text(d, "fault", where),
        upstream_response=_frame(d, "upstream_response", where),
        expects_response=bool(d.get("expects_response", True)),
        local=bool(d.get("local_answer", False)),
        broker=_text(d, "broker", where),
    )


def _constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _parse(line):
    return json.loads(line, parse_constant=_constant)


def read_jsonl(path, warn=None):
    """The exchanges of a JSON-lines capture, in order. A last line cut short (a capture
    still being written, a proxy killed mid-line) is left out with a warning, as are lines of
    unpaired frames (counted in one warning at the end); `warn(text)` gets them (by
    default, a CaptureWarning)."""
    warn = warn or _warn
    unpaired = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            where = f"{path}: line {number}"
            torn = not line.endswith(b"\n")
            line = line.strip()
            if not line:
                continue
            try:
                d = _parse(line)
            except RecursionError:
                raise CaptureError(f"{where}: not JSON (nested too deep)") from None
            except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
                if torn:
                    warn(
                        f"{where}: cut short (the file ends mid-line): the exchanges before it were read"
                    )
                    break
                raise CaptureError(f"{where}: not JSON ({e})") from None
            if isinstance(d, dict) and "unpaired" in d:
                _frame(d, "frame", where)
                unpaired.append(number)
                continue
            yield _exchange_of(d, where)
    if unpaired:
        warn(
            f"{path}: {len(unpaired)} frame{'s' if len(unpaired) != 1 else ''} forwarded without a "
            f"pair (unpaired: a request too short for a header, or a response that answers no "
            f"request), first at line {unpaired[0]}: not shown as exchanges"
        )


def _warn(text):
    warnings.warn(text, CaptureWarning, stacklevel=3)
