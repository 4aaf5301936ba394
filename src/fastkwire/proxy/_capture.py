"""The proxy's JSON-lines captures (`--record`), written and read back.

One line per exchange: time (Unix seconds), conn, client, client_id, api, api_key, version,
correlation_id, latency_ms, fault, local_answer, and both frames as hex (`request`,
`response`: null when none came; `upstream_response` too when the proxy rewrote it).
"""

import json

from ._exchange import Exchange
from ._frames import RequestHeader, request_header


class CaptureError(ValueError):
    """A capture that cannot be read; the message names the file and the line or offset."""


def record_of(ex):
    return {
        "time": ex.time,
        "conn": ex.conn,
        "client": ex.client,
        "client_id": ex.client_id,
        "api": ex.api,
        "api_key": ex.api_key,
        "version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "latency_ms": None if ex.latency_ms is None else round(ex.latency_ms, 3),
        "fault": ex.fault,
        "local_answer": ex.local,
        "expects_response": ex.expects_response,
        "request": ex.request.hex(),
        "response": None if ex.response is None else ex.response.hex(),
        **(
            {"upstream_response": ex.upstream_response.hex()}
            if ex.upstream_response is not None
            else {}
        ),
    }


class CaptureWriter:
    """Writes one JSON line per exchange to `path` (a file name or a text file object)."""

    def __init__(self, path):
        self._own = isinstance(path, (str, bytes)) or hasattr(path, "__fspath__")
        self._file = open(path, "w", encoding="utf-8") if self._own else path
        self.count = 0

    def write(self, ex):
        self._file.write(json.dumps(record_of(ex), ensure_ascii=False) + "\n")
        self.count += 1

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
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise CaptureError(f"{where}: {key} is not hex") from None


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
                int(d["api_key"]),
                int(d["version"]),
                int(d["correlation_id"]),
                d.get("client_id"),
                None,
            )
        except (KeyError, TypeError, ValueError):
            raise CaptureError(
                f"{where}: the request is too short for a header, and api_key, "
                "version and correlation_id are missing"
            ) from None
    latency = d.get("latency_ms")
    if latency is not None and not isinstance(latency, (int, float)):
        raise CaptureError(f"{where}: latency_ms is not a number")
    when = d.get("time", 0)
    if not isinstance(when, (int, float)):
        raise CaptureError(f"{where}: time is not a number")
    return Exchange.restore(
        d.get("conn", 0),
        str(d.get("client", "?")),
        request,
        _frame(d, "response", where),
        when,
        latency,
        header,
        fault=d.get("fault"),
        upstream_response=_frame(d, "upstream_response", where),
        expects_response=bool(d.get("expects_response", True)),
        local=bool(d.get("local_answer", False)),
    )


def read_jsonl(path):
    """The exchanges of a JSON-lines capture, in order."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            where = f"{path}: line {number}"
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise CaptureError(f"{where}: not JSON ({e})") from None
            yield _exchange_of(d, where)
