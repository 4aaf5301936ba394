"""Every public entry point of fastkwire, fully typed: `mypy --strict` must accept this file.

It also runs (python examples/typed_usage.py) and checks what it gets, so the types it
relies on are the ones the codecs really return.
"""

from __future__ import annotations

import importlib.util

import fastkwire
from fastkwire import (
    MESSAGE_CLASSES,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    DecodeError,
    EncodeError,
    LeaveGroupRequest,
    LeaveGroupResponse,
    RequestHeader,
    ResponseHeader,
    StreamsGroupHeartbeatRequest,
    TaskOffsetColumns,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    explain,
)
from fastkwire import records
from fastkwire.explain import render_tree
from fastkwire.records import Batches, Record, RecordBatch, RecordColumns


def leave_request() -> LeaveGroupRequest:
    member: LeaveGroupRequest.MemberIdentity = LeaveGroupRequest.MemberIdentity(
        member_id="m-1", group_instance_id=None, reason="bye"
    )
    return LeaveGroupRequest(group_id="orders", members=[member])


def body_round_trip(version: int) -> LeaveGroupRequest:
    request = leave_request()
    body: bytes = request.encode(version)
    buffer = bytearray(len(body) + 2)
    written: int = request.encode_into(buffer, 2, version)
    assert written == len(body) and bytes(buffer[2:]) == body
    decoded = LeaveGroupRequest.decode(memoryview(body), version, arrays="list")
    again, end = LeaveGroupRequest.decode_from(body, version, 0)
    assert decoded == request and again == request and end == len(body)
    return decoded


def dict_round_trip(request: LeaveGroupRequest) -> None:
    as_dict = request.to_dict()
    assert LeaveGroupRequest.from_dict(as_dict) == request
    first = request.members[0]
    reason: str | None = first.reason
    assert reason == "bye" and "member_id='m-1'" in repr(first)
    first.unknown_tagged_fields[99] = b"\x01"
    assert first.unknown_tagged_fields == {99: b"\x01"}


def class_attributes() -> list[str]:
    lines = []
    for key, cls in sorted(REQUEST_CLASSES.items()):
        flexible = cls.FLEXIBLE_MIN if cls.FLEXIBLE_MIN is not None else "never"
        lines.append(
            f"{cls.__name__}: key {cls.API_KEY}, v{cls.MIN_VERSION}-{cls.MAX_VERSION}, "
            f"flexible from {flexible}"
        )
        assert key == cls.API_KEY and cls.is_flexible(cls.MAX_VERSION) == (
            cls.FLEXIBLE_MIN is not None
        )
    assert RESPONSE_CLASSES[LeaveGroupResponse.API_KEY] is LeaveGroupResponse
    assert RequestHeader in MESSAGE_CLASSES and RequestHeader.API_KEY is None
    return lines


def frames() -> None:
    frame: bytes = encode_request(leave_request(), 5, correlation_id=7, client_id="typed")
    header, message = decode_request(frame)
    assert isinstance(header, RequestHeader) and header.client_id == "typed"
    assert isinstance(message, LeaveGroupRequest) and message.group_id == "orders"

    response = LeaveGroupResponse(
        error_code=0,
        members=[
            LeaveGroupResponse.MemberResponse(member_id="m-1", error_code=0),
        ],
    )
    reply = encode_response(response, 5, correlation_id=header.correlation_id)
    rheader, rmessage = decode_response(reply, LeaveGroupResponse.API_KEY, 5)
    assert isinstance(rheader, ResponseHeader) and rheader.correlation_id == 7
    assert rmessage == response


def errors() -> None:
    try:
        LeaveGroupRequest.decode(b"\x00", 0)
    except DecodeError as exc:
        offset: int = exc.offset
        print(f"DecodeError at offset {offset}: {exc.reason} ({exc.path or 'top level'})")
    else:
        raise AssertionError("a one-byte body must not decode")
    try:
        LeaveGroupRequest(group_id="g").encode(LeaveGroupRequest.MAX_VERSION + 1)
    except UnsupportedVersionError as exc:
        print(f"UnsupportedVersionError: {exc}")
    else:
        raise AssertionError("a version past the range must not encode")
    try:
        LeaveGroupResponse(throttle_time_ms=1 << 40).encode(1)
    except EncodeError as exc:
        print(f"EncodeError: {exc.path}: {exc.reason}")
    else:
        raise AssertionError("an int32 field must not take 2**40")


def annotated_layout() -> str:
    frame = encode_request(leave_request(), 5, correlation_id=1)
    tree = explain(frame)
    assert tree.offset == 0 and tree.size == len(frame)
    assert [c.name for c in tree.children] == ["Frame", "RequestHeader", "LeaveGroupRequest"]
    return render_tree(tree)


def task_offset_columns() -> None:
    TaskOffset = StreamsGroupHeartbeatRequest.TaskOffset
    rows = [TaskOffset(subtopology_id="s0", partition=p, offset=100 * p) for p in range(3)]
    columns = TaskOffsetColumns.from_list(rows)
    assert len(columns) == 3 and columns[1].offset == 100 and list(columns) == rows
    assert columns == TaskOffsetColumns(["s0"] * 3, [0, 1, 2], [0, 100, 200])


def record_batches() -> None:
    written: list[Record] = [
        Record(
            offset=None,
            timestamp=1_700_000_000_000 + i,
            key=None,
            value=b"v%d" % i,
            headers=[("trace", b"t")],
        )
        for i in range(3)
    ]
    data: bytes = records.write_batch(
        written, base_offset=40, producer_id=7, producer_epoch=0, base_sequence=0
    )
    batches: Batches = records.read_batches(data + data[:20])
    assert batches.tail == data[:20] and len(batches) == 1
    batch: RecordBatch = batches[0]
    assert (batch.base_offset, batch.compression, batch.producer_id) == (40, "none", 7)
    first: Record = batch.records[0]
    assert first.offset == 40 and first.value == b"v0" and first.headers == [("trace", b"t")]
    assert records.crc32c(memoryview(data)[21:]) == batch.crc
    if importlib.util.find_spec("numpy") is not None:  # columns are numpy arrays
        cols: RecordColumns = records.read_columns(data)
        assert len(cols) == 3 and cols.value.to_pylist() == [b"v0", b"v1", b"v2"]
        assert (
            records.write_batch(
                cols, base_offset=40, producer_id=7, producer_epoch=0, base_sequence=0
            )
            == data
        )


def main() -> None:
    print(f"fastkwire {fastkwire.__version__} ({fastkwire.implementation})")
    dict_round_trip(body_round_trip(5))
    print("\n".join(class_attributes()))
    frames()
    errors()
    print(annotated_layout().splitlines()[0])
    record_batches()
    if importlib.util.find_spec("numpy") is not None:  # columns are numpy arrays
        task_offset_columns()


if __name__ == "__main__":
    main()
