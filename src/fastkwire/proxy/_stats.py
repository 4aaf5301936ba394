"""The per-API summary: count, bytes each way, latency p50/p99/max, error codes.

Latencies go into logarithmic buckets 2% wide (exact maximum kept), so a summary's memory
is bounded however many exchanges it counts; a percentile is within 2% of the true one.
"""

import math
import threading

_RATIO = math.log(1.02)
_FLOOR_MS = 0.001  # latencies below a microsecond share the first bucket


class ApiStats:
    __slots__ = (
        "api",
        "count",
        "answered",
        "request_bytes",
        "response_bytes",
        "max_ms",
        "errors",
        "faults",
        "uninspected",
        "_buckets",
    )

    def __init__(self, api):
        self.api = api
        self.count = 0
        self.answered = 0
        self.request_bytes = 0
        self.response_bytes = 0
        self.max_ms = None
        self.errors = {}  # error name -> responses that carried it
        self.faults = 0
        self.uninspected = 0  # responses whose error codes were not read (the proxy was busy)
        self._buckets = {}

    def add(self, request_size, response_size, latency_ms, errors, fault):
        self.count += 1
        self.request_bytes += request_size
        if fault:
            self.faults += 1
        if response_size is not None:
            self.answered += 1
            self.response_bytes += response_size
        if latency_ms is not None and response_size is not None:
            self.max_ms = latency_ms if self.max_ms is None else max(self.max_ms, latency_ms)
            b = int(math.log(max(latency_ms, _FLOOR_MS) / _FLOOR_MS) / _RATIO)
            self._buckets[b] = self._buckets.get(b, 0) + 1
        if errors:
            self.add_errors(errors)

    def add_errors(self, errors):
        for name in errors:
            self.errors[name] = self.errors.get(name, 0) + 1

    def percentile(self, p):
        """The latency (ms) below which `p` percent of the answered exchanges fall; None if
        none was answered."""
        total = sum(self._buckets.values())
        if not total:
            return None
        rank = max(1, math.ceil(total * p / 100))
        seen = 0
        for b in sorted(self._buckets):
            seen += self._buckets[b]
            if seen >= rank:
                # the bucket's middle, never past the exact maximum
                return min(_FLOOR_MS * math.exp((b + 0.5) * _RATIO), self.max_ms)
        return self.max_ms

    def to_dict(self):
        return {
            "api": self.api,
            "count": self.count,
            "answered": self.answered,
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "p50_ms": self.percentile(50),
            "p99_ms": self.percentile(99),
            "max_ms": self.max_ms,
            "errors": dict(self.errors),
            "faults": self.faults,
            **({"not_inspected": self.uninspected} if self.uninspected else {}),
        }


class Summary:
    """Counts exchanges by API name. Safe to use from several threads (the proxy counts an
    exchange on its event loop, and adds its error codes from the inspector's thread)."""

    def __init__(self):
        self.apis = {}
        self.lock = threading.RLock()
        self._by_key = {}  # api key -> its ApiStats, for add_forwarded
        self.notes = {}  # what the proxy itself did, by name -> how many times

    def add_forwarded(self, ex):
        """Counts an exchange the proxy forwarded (its error codes come later: add_errors):
        what add_exchange does, without the error codes, in fewer steps (once per exchange
        on the proxy's event loop)."""
        stats = self._by_key.get(ex.api_key)
        if stats is None:
            with self.lock:
                stats = self._by_key[ex.api_key] = self._stats(ex.api)
        response, finished = ex.response, ex.finished
        with self.lock:
            stats.add(
                len(ex.request),
                None if response is None else len(response),
                None if finished is None else (finished - ex.started) * 1000,
                (),
                ex.fault,
            )

    def add_exchange(self, exchange):
        self.add(
            exchange.api,
            exchange.request_size,
            exchange.response_size,
            exchange.latency_ms,
            exchange.error_codes(),
            exchange.fault,
        )

    def _stats(self, api):
        stats = self.apis.get(api)
        if stats is None:
            stats = self.apis[api] = ApiStats(api)
        return stats

    def add(self, api, request_size, response_size, latency_ms, errors=(), fault=None):
        with self.lock:
            self._stats(api).add(request_size, response_size, latency_ms, errors, fault)

    def add_errors(self, api, errors):
        """The error codes of one response of `api` counted already."""
        with self.lock:
            self._stats(api).add_errors(errors)

    def add_note(self, name, n=1):
        """Counts something the proxy did on its own (a broker withheld from clients)."""
        with self.lock:
            self.notes[name] = self.notes.get(name, 0) + n

    def not_inspected(self, api):
        with self.lock:
            self._stats(api).uninspected += 1

    @property
    def count(self):
        with self.lock:
            return sum(s.count for s in self.apis.values())

    def to_dict(self):
        with self.lock:
            d = {"apis": [self.apis[k].to_dict() for k in sorted(self.apis)]}
            if self.notes:
                d["notes"] = dict(self.notes)
            return d

    def table(self):
        """The summary as lines of text, one row per API, and a total."""
        with self.lock:
            return self._table()

    def _table(self):
        rows = [("API", "COUNT", "REQ BYTES", "RESP BYTES", "P50 MS", "P99 MS", "MAX MS", "ERRORS")]
        for name in sorted(self.apis):
            s = self.apis[name]
            errors = " ".join(f"{e}:{n}" for e, n in sorted(s.errors.items(), key=lambda x: -x[1]))
            if s.faults:
                errors = (errors + f" faults:{s.faults}").strip()
            if s.uninspected:
                errors = (errors + f" not-inspected:{s.uninspected}").strip()
            rows.append(
                (
                    name,
                    str(s.count),
                    str(s.request_bytes),
                    str(s.response_bytes),
                    _ms(s.percentile(50)),
                    _ms(s.percentile(99)),
                    _ms(s.max_ms),
                    errors or "-",
                )
            )
        total = sum(s.count for s in self.apis.values())
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = [
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
            )
            + f"  {r[-1]}"
            for r in rows
        ]
        lines.append(f"{total} exchange{'s' if total != 1 else ''}")
        uninspected = sum(s.uninspected for s in self.apis.values())
        if uninspected:
            lines.append(
                f"{uninspected} response{'s' if uninspected != 1 else ''} not inspected for "
                "error codes: the proxy was busier than its inspector"
            )
        lines += [f"{name}: {n}" for name, n in sorted(self.notes.items())]
        return lines


def _ms(value):
    return "-" if value is None else f"{value:.2f}"
