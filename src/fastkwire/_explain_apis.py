"""The Kafka APIs by key, for explain, its examples and its command line: request and
response schemas, API names, header versions."""

from __future__ import annotations

from functools import lru_cache

from . import _framing, _schema


# Loaded on first use: importing explain must stay quick.
@lru_cache(maxsize=None)
def _by_kind(kind):
    return {m.api_key: m for m in _schema.all_messages() if m.kind == kind}


def request_schemas():
    """api_key -> request Message."""
    return _by_kind("request")


def response_schemas():
    """api_key -> response Message."""
    return _by_kind("response")


@lru_cache(maxsize=None)
def api_names():
    """api_key -> API name (13 -> "LeaveGroup")."""
    return {key: m.name[: -len("Request")] for key, m in request_schemas().items()}


def header_versions(api_key: int, version: int) -> tuple[int, int]:
    """(request header version, response header version) for an API version."""
    req = request_schemas().get(api_key)
    return _framing.header_versions(api_key, req is not None and req.is_flexible(version))
