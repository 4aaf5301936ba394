"""How an exchange or an event is shown: one text line, or one JSON object.

Every text field can come from a peer or a capture file (a client id, a client address
read back from a capture, a fault's name, a broker's error text), so each is escaped for
the terminal (`printable`: C0/C1 controls, bidi and other format characters), and JSON is
written ASCII-only (`\\u` escapes), so neither form can carry a control character raw."""

import json
import time

from .._printable import printable

CLIENT_ID_LIMIT = 60


def _clock(t):
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


_second = [None, ""]  # the last whole second formatted: most lines share it


def _iso(t):
    whole = int(t)
    if whole != _second[0]:
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{_second[1]}.{int((t - whole) * 1_000_000):06d}Z"


def exchange_line(ex):
    """`time client [client-id] API vN #correlation sizes latency errors`, on one line."""
    cid = "-" if ex.client_id is None else printable(ex.client_id, CLIENT_ID_LIMIT) or '""'
    if ex.response is not None:
        answer = f"{ex.request_size}B -> {ex.response_size}B {ex.latency_ms:.2f}ms"
    elif ex.expects_response:
        answer = f"{ex.request_size}B -> (no response)"
    else:
        answer = f"{ex.request_size}B -> (acks=0, none expected)"
    client = printable(ex.client, CLIENT_ID_LIMIT)
    if ex.broker is not None:
        client += f" -> {printable(ex.broker, CLIENT_ID_LIMIT)}"
    parts = [
        _clock(ex.time),
        client,
        cid,
        f"{ex.api} v{ex.api_version}",
        f"#{ex.correlation_id}",
        answer,
    ]
    errors = ex.error_codes()
    if errors:
        parts.append(" ".join(errors))
    if ex.fault:
        parts.append(f"[fault: {printable(ex.fault)}]")
    if ex.upstream_response is not None:
        parts.append("[advertised address rewritten]")
    problem = ex.decode_error()
    if problem:
        parts.append(f"[{printable(problem)}]")
    extra = ex.trailing_bytes()
    if extra:
        parts.append(f"[response: {extra} trailing bytes kept]")
    return "  ".join(parts)


def exchange_dict(ex):
    return {
        "time": _iso(ex.time),
        "conn": ex.conn,
        "client": ex.client,
        "client_id": ex.client_id,
        "broker": ex.broker,
        "api": ex.api,
        "api_key": ex.api_key,
        "version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "request_bytes": ex.request_size,
        "response_bytes": ex.response_size,
        "latency_ms": None if ex.latency_ms is None else round(ex.latency_ms, 3),
        "errors": ex.error_codes(),
        "fault": ex.fault,
        "local_answer": ex.local,
        "rewritten": ex.upstream_response is not None,
        "decode_error": ex.decode_error(),
        "trailing_bytes": ex.trailing_bytes(),
    }


def exchange_json(ex):
    return json.dumps(exchange_dict(ex))


def event_line(event):
    return (
        f"{_clock(event.time)}  {printable(event.client, CLIENT_ID_LIMIT)}  "
        f"conn {event.conn} {event.kind}: {printable(event.text)}"
    )


def event_json(event):
    return json.dumps(
        {
            "time": _iso(event.time),
            "event": event.kind,
            "conn": event.conn,
            "client": event.client,
            "text": event.text,
        }
    )
