"""decode_request/decode_response(trailing="keep") and fastkwire.proxy.explain_frame(trailing=
"keep"): bytes after the end of the message, which a broker ignores, are returned (a third
item) or shown (a last node) instead of refused. Both implementations, the same results; the default stays strict.

The frames are the two librdkafka 2.16 sends: a flexible Metadata v12 request for all topics
that keeps the legacy int32 topics count (00 00 00 00 where a one-byte varint belongs), and
an AlterUserScramCredentials v0 request with one extra byte.
"""

import importlib
import struct

import pytest

from fastkwire.errors import DecodeError
from fastkwire.explain import explain
from fastkwire.proxy import explain_frame

METADATA_V12_HEADER = struct.pack(">hhih", 3, 12, 7, 7) + b"rdkafka" + b"\x00"
# topics (int32 0), allow_auto_topic_creation, include_topic_authorized_operations, no tags
METADATA_V12_BODY = b"\x00\x00\x00\x00" + b"\x01" + b"\x00" + b"\x00"


def framed(body):
    return struct.pack(">i", len(body)) + body


LIBRDKAFKA_METADATA = framed(METADATA_V12_HEADER + METADATA_V12_BODY)


def scram_request(impl):
    req = impl.AlterUserScramCredentialsRequest(deletions=[], upsertions=[])
    return impl.encode_request(req, 0, 9, "rdkafka")


def with_extra(frame, extra):
    return struct.pack(">i", len(frame) - 4 + len(extra)) + frame[4:] + extra


def test_default_refuses_trailing_bytes_at_their_offset(impl):
    with pytest.raises(DecodeError, match="3 trailing bytes") as err:
        impl.decode_request(LIBRDKAFKA_METADATA)
    assert err.value.offset == len(LIBRDKAFKA_METADATA) - 3
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        impl.decode_request(LIBRDKAFKA_METADATA, trailing="error")


def test_keep_returns_them_as_a_third_item(impl):
    header, msg, extra = impl.decode_request(LIBRDKAFKA_METADATA, trailing="keep")
    assert (
        header.request_api_key == 3 and header.client_id == "rdkafka" and header.correlation_id == 7
    )
    assert msg.topics is None  # "all topics", as librdkafka meant
    assert extra == b"\x01\x00\x00"

    frame = scram_request(impl)
    plain = impl.decode_request(frame)
    assert impl.decode_request(frame, trailing="keep") == (*plain, b"")
    assert impl.decode_request(with_extra(frame, b"\x00"), trailing="keep") == (*plain, b"\x00")


def test_keep_on_responses(impl):
    answer = impl.ApiVersionsResponse(
        error_code=0,
        api_keys=[impl.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
    )
    frame = impl.encode_response(answer, 3, 5)
    header, msg = impl.decode_response(frame, 18, 3)
    assert impl.decode_response(with_extra(frame, b"xy"), 18, 3, trailing="keep") == (
        header,
        msg,
        b"xy",
    )
    with pytest.raises(DecodeError, match="2 trailing bytes"):
        impl.decode_response(with_extra(frame, b"xy"), 18, 3)


def test_keep_does_not_hide_other_errors(impl):
    # A wrong size prefix, or a message cut short, fails as before.
    with pytest.raises(DecodeError, match="frame size"):
        impl.decode_request(LIBRDKAFKA_METADATA + b"\x00", trailing="keep")
    cut = scram_request(impl)[:-1]
    with pytest.raises(DecodeError):
        impl.decode_request(framed(cut[4:]), trailing="keep")


@pytest.mark.parametrize("bad", ["ignore", None, True, "KEEP"])
def test_bad_option_names_the_parameter(impl, bad):
    with pytest.raises(ValueError, match="trailing"):
        impl.decode_request(LIBRDKAFKA_METADATA, trailing=bad)
    with pytest.raises(ValueError, match="trailing"):
        explain_frame(LIBRDKAFKA_METADATA, trailing=bad)


def test_both_implementations_agree():
    modules = []
    for name in ("fastkwire._messages_python", "fastkwire._messages_cython"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            pytest.skip("compiled extension not built")
    frames = [LIBRDKAFKA_METADATA, with_extra(scram_request(modules[0]), b"\x00\x01")]
    for frame in frames:
        got = [m.decode_request(frame, trailing="keep") for m in modules]
        assert [(h.to_dict(), msg.to_dict(), extra) for h, msg, extra in got[:1]] == [
            (h.to_dict(), msg.to_dict(), extra) for h, msg, extra in got[1:]
        ]


def test_explain_frame_shows_them_as_a_last_node():
    with pytest.raises(DecodeError, match="3 trailing bytes") as err:
        explain(LIBRDKAFKA_METADATA)
    assert err.value.offset == len(LIBRDKAFKA_METADATA) - 3
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        explain_frame(LIBRDKAFKA_METADATA)
    root = explain_frame(LIBRDKAFKA_METADATA, trailing="keep")
    last = root.children[-1]
    assert (last.name, last.offset, last.size, last.value) == (
        "trailing",
        len(LIBRDKAFKA_METADATA) - 3,
        3,
        b"\x01\x00\x00",
    )
    assert root.size == len(LIBRDKAFKA_METADATA) and root.value["trailing"] == "010000"
    assert "a broker ignores them" in last.description
    # Without trailing bytes the tree is what it always was.
    frame = (
        struct.pack(">i", len(METADATA_V12_HEADER) + 4) + METADATA_V12_HEADER + b"\x00\x01\x00\x00"
    )
    assert [c.name for c in explain_frame(frame, trailing="keep").children] == [
        c.name for c in explain(frame).children
    ]
    # Other errors still raise, with their own offsets.
    with pytest.raises(DecodeError, match="frame size"):
        explain_frame(LIBRDKAFKA_METADATA + b"\x00", trailing="keep")
    cut = framed(METADATA_V12_HEADER + b"\x01")  # the topics count, then nothing
    with pytest.raises(DecodeError) as err:
        explain_frame(cut, trailing="keep")
    assert "trailing" not in str(err.value)


def test_explain_frame_keeps_trailing_bytes_of_responses():
    import fastkwire as fk

    answer = fk.ApiVersionsResponse(error_code=0, api_keys=[])
    frame = with_extra(fk.encode_response(answer, 3, 5), b"\xaa\xbb")
    root = explain_frame(frame, "ApiVersions", 3, trailing="keep")
    assert root.children[-1].value == b"\xaa\xbb" and root.children[-1].offset == len(frame) - 2
