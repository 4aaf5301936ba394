"""`fastkwire explain` shows the record batches inside Produce and Fetch frames."""

import pytest

import fastkwire._messages_python as codec
from fastkwire import records
from fastkwire.explain import explain, render_tree

RECORDS = [
    records.Record(
        offset=i,
        timestamp=1_700_000_000_000 + i,
        key=b"k%d" % i,
        value=b"v" * i,
        headers=[("trace", b"\x01")],
    )
    for i in range(5)
]


def _fetch_frame(data, version=16):
    F = codec.FetchResponse
    msg = F(responses=[F.FetchableTopicResponse(partitions=[F.PartitionData(records=data)])])
    return codec.encode_response(msg, version, correlation_id=3)


def _records_node(root):
    return next(n for n in root.walk() if n.name == "records")


def _batches(field):
    """The nodes under a records field after its length prefix."""
    assert field.children[0].name == "length"
    return field.children[1:]


def test_batches_and_records_sit_at_their_frame_offsets():
    data = records.write_batch(RECORDS, base_offset=100)
    frame = _fetch_frame(data)
    field = _records_node(explain(frame, codec.FetchResponse.API_KEY, 16, max_items=None))
    start = field.end - len(data)
    (batch,) = _batches(field)
    assert (batch.name, batch.offset, batch.size) == ("batch", start, len(data))
    head = {c.name: c for c in batch.children}
    assert head["base_offset"].value == 100 and head["record_count"].value == 5
    assert frame[head["crc"].offset : head["crc"].end] == data[17:21]
    recs = head["records"].children
    assert [r.name for r in recs] == [f"record[{i}]" for i in range(5)]
    for rec, want in zip(recs, RECORDS):
        fields = {c.name: c for c in rec.children}
        assert frame[fields["key"].offset : fields["key"].end] == want.key
        # An empty value has no node of its own: its length says 0.
        assert (fields["value"].value if want.value else fields["value_length"].value) == (
            want.value or 0
        )
        (header,) = [c for c in rec.children if c.name == "header[0]"]
        assert [c.value for c in header.children if c.name in ("key", "value")] == [
            "trace",
            b"\x01",
        ]
    # The field keeps its bytes as the Kafka message has them.
    assert field.value == data


def test_compressed_batches_show_records_in_decompressed_offsets():
    pytest.importorskip("cramjam")
    data = records.write_batch(RECORDS, compression="zstd")
    field = _records_node(explain(_fetch_frame(data), 1, 16, max_items=None))
    recs = {c.name: c for c in _batches(field)[0].children}["records"]
    assert "zstd" in recs.value and "decompressed" in recs.value
    assert [r.name for r in recs.children] == [f"record[{i}]" for i in range(5)]
    assert recs.children[0].offset == 0
    assert recs.children[0].description == "offset in the decompressed bytes"


def test_a_cut_off_batch_is_a_tail_and_many_records_are_summarised():
    data = records.write_batch(RECORDS)
    field = _records_node(explain(_fetch_frame(data + data[:30]), 1, 16, max_items=2))
    batch, tail = _batches(field)
    assert (tail.name, tail.size) == ("tail", 30)
    recs = {c.name: c for c in batch.children}["records"].children
    assert [r.name for r in recs] == ["record[0]", "record[1]", "record[2..4]"]
    assert recs[2].type == "summary" and recs[2].value == 3
    assert recs[2].end == batch.end


def test_unreadable_records_are_a_note_not_a_broken_frame():
    data = bytearray(records.write_batch(RECORDS))
    data[16] = 7  # an unknown magic byte
    root = explain(_fetch_frame(bytes(data)), 1, 16)
    (note,) = _batches(_records_node(root))
    assert note.name == "batches" and "not readable" in note.display and "magic" in note.display
    assert "not readable" in render_tree(root)


def test_produce_requests_show_their_batches_too():
    P = codec.ProduceRequest
    data = records.write_batch(RECORDS[:2])
    msg = P(
        acks=-1,
        timeout_ms=100,
        topic_data=[
            P.TopicProduceData(
                name="t", partition_data=[P.PartitionProduceData(index=0, records=data)]
            )
        ],
    )
    root = explain(codec.encode_request(msg, 9, correlation_id=1, client_id="c"))
    field = _records_node(root)
    assert [c.name for c in _batches(field)] == ["batch"]


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_the_frame_bytes_are_tiled_by_the_shown_nodes(compression):
    if compression != "none":
        pytest.importorskip("cramjam")
    from test_explain import assert_tiles

    data = records.write_batch(RECORDS, compression=compression)
    frame = _fetch_frame(data + data[:7])
    root = explain(frame, codec.FetchResponse.API_KEY, 16, max_items=None)
    assert_tiles(root, len(frame))
    field = _records_node(root)
    assert field.children[0].name == "length" and field.children[0].value == len(data) + 7
    compressed = [n for n in root.walk() if n.type == "compressed"]
    assert len(compressed) == (compression != "none")


def test_printable_keys_and_values_show_as_text_with_their_hex():
    data = records.write_batch(
        [
            records.Record(key=b"k0", value=b"hello world", headers=[("h", b"x\x00")]),
            records.Record(key="é".encode(), value=bytes(range(250, 256))),
        ],
        base_offset=0,
    )
    field = _records_node(explain(_fetch_frame(data), codec.FetchResponse.API_KEY, 16))
    text = render_tree(field)
    assert '+-- key = "k0" (hex 6b30) [' in text
    assert '+-- value = "hello world" (hex 68656c6c6f20776f726c64) [' in text
    assert '+-- key = "é" (hex c3a9) [' in text  # UTF-8 text is text
    assert "+-- value = fafbfcfdfeff [" in text  # not UTF-8: hex alone
    assert "+-- value = 7800 [" in text  # a control character: hex alone
    assert '+-- key = "h" [' in text  # header keys are strings


@pytest.mark.parametrize("count, shown", [(1, "1 record"), (2, "2 records")])
def test_record_counts_agree_in_number(count, shown):
    data = records.write_batch([records.Record(value=b"v")] * count, base_offset=0)
    field = _records_node(explain(_fetch_frame(data), codec.FetchResponse.API_KEY, 16))
    (batch,) = _batches(field)
    assert batch.value == f"magic 2, {shown}, none"
    assert next(c for c in batch.children if c.name == "records").value == shown
