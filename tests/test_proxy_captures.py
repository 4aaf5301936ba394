"""Reading captures back, from hostile and damaged files: pcap pairing in linear time, TCP
reassembly of overlapping and out-of-order segments, files cut short (read what is whole,
then warn), broken streams and gaps reported, the broker's port found from the handshake,
acks=0 Produce requests, unchecked values in JSON lines and rules files (exit 2 naming the
line), escape sequences in any field, rules that could never match, and the error codes read
from a response's bytes agreeing with the decoded message's. No broker: the files are built
here (dpkt, the pcap extra, for the pcap ones)."""

import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import fastkwire as fk
from fastkwire.cli import main
from fastkwire.proxy import (
    CaptureError,
    CaptureWarning,
    CaptureWriter,
    Exchange,
    PcapWriter,
    ProxyEvent,
    Rule,
    RuleError,
    exchange_json,
    exchange_line,
    read_capture,
    read_jsonl,
)
from fastkwire.proxy._error_scan import response_error_codes
from fastkwire.proxy._exchange import collect_error_codes
from fastkwire.proxy._frames import request_header

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import differential as D  # noqa: E402

CHILD_TIMEOUT = 30.0
UPSTREAM = ("127.0.0.1", 29092)


def api_versions_pair(correlation_id, client_id="c"):
    req = fk.encode_request(
        fk.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        3,
        correlation_id,
        client_id,
    )
    resp = fk.encode_response(fk.ApiVersionsResponse(error_code=0), 3, correlation_id)
    return req, resp


def exchange(correlation_id, conn=1, client="127.0.0.1:40001", when=1_700_000_000.0, **kw):
    req, resp = api_versions_pair(correlation_id, **kw)
    ex = Exchange(conn, client, request_header(req), req)
    ex.time = when + correlation_id / 1000
    ex.response = resp
    ex.finished = ex.started + 0.002
    return ex


def written_pcap(path, exchanges):
    w = PcapWriter(path, UPSTREAM)
    for ex in exchanges:
        w.write(ex)
    w.close()
    return path


def collect_warnings(fn, *args):
    got = []
    result = fn(*args, warn=got.append)
    return (list(result) if not isinstance(result, list) else result), got


# ---------------------------------------------------------------- raw TCP packets


def tcp_pcap(path, packets, client=("10.0.0.1", 40001), server=("10.0.0.2", 9092)):
    """A pcap of TCP packets (from_client, seq, payload, flags) between client and server."""
    dpkt = pytest.importorskip("dpkt")
    import ipaddress

    with open(path, "wb") as f:
        w = dpkt.pcap.Writer(f, linktype=dpkt.pcap.DLT_EN10MB)
        for i, (from_client, seq, payload, flags) in enumerate(packets):
            src, dst = (client, server) if from_client else (server, client)
            tcp = dpkt.tcp.TCP(
                sport=src[1], dport=dst[1], seq=seq & 0xFFFFFFFF, flags=flags, data=payload
            )
            ip = dpkt.ip.IP(
                src=ipaddress.ip_address(src[0]).packed,
                dst=ipaddress.ip_address(dst[0]).packed,
                p=dpkt.ip.IP_PROTO_TCP,
                data=tcp,
            )
            ip.len = len(ip)
            eth = dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
            w.writepkt(bytes(eth), 1_700_000_000 + i / 1000)
    return path


def data_packets(from_client, isn, data, pieces):
    """(from_client, seq, payload, flags) for the given [start, end) pieces of data."""
    ack = 0x18  # ACK | PSH
    return [(from_client, isn + 1 + a, data[a:b], ack) for a, b in pieces]


def handshake(c_isn, s_isn):
    return [(True, c_isn, b"", 0x02), (False, s_isn, b"", 0x12)]


def test_pairing_is_by_correlation_id_not_a_scan(tmp_path):
    """40,000 requests answered in reverse order: a scan of the pending requests per
    response takes minutes; a dict, a second or two. Run in a child with a timeout, as a
    hang guard."""
    pytest.importorskip("dpkt")
    n = 40_000
    reqs = b"".join(api_versions_pair(i)[0] for i in range(n))
    resps = b"".join(api_versions_pair(i)[1] for i in reversed(range(n)))
    chunk = 60_000
    packets = handshake(100, 5000)
    packets += data_packets(True, 100, reqs, [(a, a + chunk) for a in range(0, len(reqs), chunk)])
    packets += data_packets(
        False, 5000, resps, [(a, a + chunk) for a in range(0, len(resps), chunk)]
    )
    path = tcp_pcap(tmp_path / "many.pcap", packets)
    code = (
        "import sys; from fastkwire.proxy import read_pcap; "
        "ex = read_pcap(sys.argv[1], 9092); "
        "print(len(ex), sum(e.response is not None for e in ex), "
        "all(e.response[4:8] == e.request[8:12] for e in ex))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    assert out.stdout.split() == [str(n), str(n), "True"], out.stderr


def test_overlapping_out_of_order_segments_are_put_back(tmp_path):
    """Segments that overlap each other and arrive out of order (a retransmission that
    covers two earlier segments, then the rest): every exchange reads, no warning."""
    pairs = [api_versions_pair(i) for i in range(20)]
    reqs = b"".join(p[0] for p in pairs)
    resps = b"".join(p[1] for p in pairs)
    step, rng = 70, random.Random(5)
    pieces = [(a, min(a + step + 50, len(reqs))) for a in range(0, len(reqs), step)]
    rng.shuffle(pieces)  # out of order, each overlapping the next by 50 bytes
    packets = handshake(1000, 9000)
    packets += data_packets(True, 1000, reqs, pieces)
    packets += data_packets(False, 9000, resps, [(0, len(resps))])
    path = tcp_pcap(tmp_path / "overlap.pcap", packets)
    got, warned = collect_warnings(read_capture, path, 9092)
    assert warned == []
    assert [(e.request, e.response) for e in got] == pairs


def test_sequence_numbers_that_wrap(tmp_path):
    pairs = [api_versions_pair(i) for i in range(5)]
    reqs = b"".join(p[0] for p in pairs)
    resps = b"".join(p[1] for p in pairs)
    isn = 0xFFFFFFFF - 40  # wraps inside the first request
    packets = handshake(isn, 7)
    packets += data_packets(True, isn, reqs, [(0, 30), (60, len(reqs)), (20, 70)])
    packets += data_packets(False, 7, resps, [(0, len(resps))])
    got, warned = collect_warnings(read_capture, tcp_pcap(tmp_path / "wrap.pcap", packets), 9092)
    assert warned == [] and [(e.request, e.response) for e in got] == pairs


def test_a_gap_that_never_fills_and_a_broken_stream_are_reported(tmp_path):
    pairs = [api_versions_pair(i) for i in range(10)]
    reqs = b"".join(p[0] for p in pairs)
    resps = b"".join(p[1] for p in pairs)
    cut = len(b"".join(p[0] for p in pairs[:4]))
    packets = handshake(1, 2)
    packets += data_packets(True, 1, reqs, [(0, cut), (cut + 10, len(reqs))])  # 10 bytes lost
    packets += data_packets(False, 2, b"\x7f\xff\xff\xff" + resps, [(0, 4 + len(resps))])
    got, warned = collect_warnings(read_capture, tcp_pcap(tmp_path / "gap.pcap", packets), 9092)
    assert [e.request for e in got] == [p[0] for p in pairs[:4]]
    text = "\n".join(warned)
    assert f"requests: the bytes at stream offset {cut} never came" in text
    assert "responses: a size prefix of 2147483647 at stream offset 0" in text


def test_segments_past_the_gap_limit_are_counted(tmp_path, monkeypatch):
    from fastkwire.proxy import _pcap

    monkeypatch.setattr(_pcap, "MAX_GAP_SEGMENTS", 3)
    req = api_versions_pair(1)[0]
    packets = handshake(1, 2) + data_packets(
        True, 1, req, [(i, i + 1) for i in range(len(req) - 1, 0, -1)]
    )
    warned = []
    with pytest.raises(CaptureError, match="no Kafka exchanges on TCP port 9092"):
        read_capture(tcp_pcap(tmp_path / "held.pcap", packets), 9092, warned.append)
    assert any("segments past a gap left out" in w for w in warned), warned


# ---------------------------------------------------------------- files cut short


def test_a_pcap_cut_inside_a_record_reads_what_is_whole(tmp_path):
    pytest.importorskip("dpkt")
    path = written_pcap(tmp_path / "t.pcap", [exchange(i) for i in range(20)])
    whole = path.read_bytes()
    for tail, where in (
        (b"\x00" * 7, "inside a record header"),
        (whole[24:40] + b"ab", "inside a record"),
    ):
        cut = tmp_path / "cut.pcap"
        cut.write_bytes(whole + tail)
        got, warned = collect_warnings(read_capture, cut, UPSTREAM[1])
        assert len(got) == 20 and all(e.response for e in got)
        assert len(warned) == 1 and where in warned[0] and "cut short" in warned[0]


def test_stats_of_a_cut_pcap_warns_on_stderr(tmp_path, capsys):
    pytest.importorskip("dpkt")
    path = written_pcap(tmp_path / "t.pcap", [exchange(i) for i in range(20)])
    path.write_bytes(path.read_bytes()[:-5])  # the last response's last packet cut
    assert main(["stats", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    apis = json.loads(captured.out)["summary"]["apis"]
    assert apis[0]["count"] == 20 and apis[0]["answered"] == 19
    assert "warning:" in captured.err and "cut short" in captured.err


def test_a_torn_last_json_line_is_left_out_with_a_warning(tmp_path):
    path = tmp_path / "t.jsonl"
    with CaptureWriter(path) as w:
        for i in range(20):
            w.write(exchange(i))
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 40])  # half a line, no newline
    got, warned = collect_warnings(read_jsonl, path)
    assert len(got) == 20 and len(warned) == 1 and "line 21: cut short" in warned[0]
    # A bad line that is not the last is still an error.
    path.write_bytes(whole[: len(whole) // 40] + b"\n" + whole)
    with pytest.raises(CaptureError, match="line 1: not JSON"):
        list(read_jsonl(path, warn=lambda text: None))


def test_warnings_default_to_capture_warning(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"request": "00"')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(read_jsonl(path)) == []
    assert [w.category for w in caught] == [CaptureWarning]


# ---------------------------------------------------------------- which streams are Kafka


def test_stats_finds_the_brokers_port_of_a_proxy_pcap(tmp_path, capsys):
    """A pcap the proxy wrote, its upstream not on 9092: stats counts its exchanges without
    --port (the handshake says which end is the broker); a --port that holds none is an
    error naming the ports the file holds."""
    pytest.importorskip("dpkt")
    path = written_pcap(tmp_path / "t.pcap", [exchange(i) for i in range(5)])
    assert main(["stats", str(path), "--json"]) == 0
    apis = json.loads(capsys.readouterr().out)["summary"]["apis"]
    assert [(a["api"], a["count"], a["answered"]) for a in apis] == [("ApiVersions", 5, 5)]
    assert main(["stats", str(path), "--port", "9092"]) == 2
    err = capsys.readouterr().err
    assert "no Kafka exchanges on TCP port 9092" in err and "29092" in err and "40001" in err
    assert main(["explain", "--capture", str(path)]) == 0
    assert "5 exchanges" in capsys.readouterr().err


def test_a_pcap_whose_tcp_is_not_kafka_is_an_error(tmp_path, capsys):
    packets = handshake(1, 2) + data_packets(True, 1, b"GET / HTTP/1.1\r\n\r\n", [(0, 18)])
    path = tcp_pcap(tmp_path / "http.pcap", packets, server=("10.0.0.2", 80))
    assert main(["stats", str(path)]) == 2
    assert "no Kafka exchanges in its TCP streams" in capsys.readouterr().err


def test_acks_zero_produce_in_a_pcap_expects_no_response(tmp_path):
    produce = fk.encode_request(fk.ProduceRequest(acks=0, timeout_ms=1000), 9, 4, "p")
    req, resp = api_versions_pair(5)
    packets = handshake(1, 2) + data_packets(True, 1, produce + req, [(0, len(produce + req))])
    packets += data_packets(False, 2, resp, [(0, len(resp))])
    got, warned = collect_warnings(read_capture, tcp_pcap(tmp_path / "acks.pcap", packets), 9092)
    assert warned == []
    assert [(e.api, e.expects_response, e.response is not None) for e in got] == [
        ("Produce", False, False),
        ("ApiVersions", True, True),
    ]
    assert "(acks=0, none expected)" in exchange_line(got[0])


# ---------------------------------------------------------------- unpaired frames


def test_unpaired_frames_are_recorded_and_reported_on_reading(tmp_path):
    pytest.importorskip("dpkt")
    stray = api_versions_pair(77)[1]
    event = ProxyEvent(ProxyEvent.ERROR, 1, "127.0.0.1:40001", "answers no request", stray, False)
    short = ProxyEvent(
        ProxyEvent.ERROR, 1, "127.0.0.1:40001", "too short", b"\x00\x00\x00\x02ab", True
    )
    jsonl, pcap = tmp_path / "t.jsonl", tmp_path / "t.pcap"
    with CaptureWriter(jsonl) as w:
        w.write(exchange(1))
        w.write_unpaired(event)
        w.write_unpaired(short)
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [d.get("unpaired") for d in lines] == [None, "response", "request"]
    assert bytes.fromhex(lines[1]["frame"]) == stray
    writer = PcapWriter(pcap, UPSTREAM)
    writer.write(exchange(1))
    writer.write_unpaired(event)
    writer.write_unpaired(short)
    writer.close()
    for path in (jsonl, pcap):
        got, warned = collect_warnings(read_capture, path)
        assert len(got) == 1 and got[0].response is not None
        assert len(warned) == 1 and "2 frames" in warned[0] and "pair" in warned[0], warned


# ---------------------------------------------------------------- unchecked values


def jsonl_with(tmp_path, **fields):
    d = {
        "time": 1_700_000_000.5,
        "conn": 1,
        "client": "127.0.0.1:1",
        "latency_ms": 1.5,
        "request": api_versions_pair(3)[0].hex(),
        "response": api_versions_pair(3)[1].hex(),
    }
    d.update(fields)
    for k in [k for k, v in fields.items() if v is ...]:
        del d[k]
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps(d) + "\n")
    return path


@pytest.mark.parametrize(
    "fields, text",
    [
        ({"time": float("nan")}, "NaN is not a JSON number"),
        ({"time": float("inf")}, "Infinity is not a JSON number"),
        ({"time": 1e300}, "time: 1e+300 is not a number"),
        ({"time": -5}, "time: -5 is not a number"),
        ({"latency_ms": float("-inf")}, "-Infinity is not a JSON number"),
        ({"latency_ms": 1e300}, "latency_ms: 1e+300"),
        ({"latency_ms": "3"}, "latency_ms: '3'"),
        ({"latency_ms": ...}, "latency_ms: missing, but the exchange has a response"),
        ({"latency_ms": None}, "latency_ms: null, but the exchange has a response"),
        ({"request": "0000", "api_key": float("inf")}, "Infinity is not a JSON number"),
        ({"request": "0000", "api_key": 10**30, "version": 1, "correlation_id": 1}, "api_key"),
        ({"request": "0000", "api_key": 18}, "version is missing"),
        ({"client": ["x"]}, "client: ['x'] is not text"),
        ({"fault": {"a": 1}}, "fault: {'a': 1} is not text"),
        ({"conn": -1}, "conn: -1 is not an integer"),
        ({"request": 5}, "request is not hex text"),
        ({"request": "abc"}, "odd number of hex digits (3)"),
    ],
)
def test_unchecked_values_in_a_capture_are_usage_errors(tmp_path, capsys, fields, text):
    path = jsonl_with(tmp_path, **fields)
    for argv in (["stats", str(path)], ["explain", "--capture", str(path)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{path}: line 1" in err and text in err, err
        assert "unexpected error" not in err


def test_json_nested_deep_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"request": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert main(["stats", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 1: not JSON (nested too deep)" in err, err


@pytest.mark.parametrize(
    "rule, text",
    [
        ('{"api": "Heartbeat", "delay_ms": 1, "times": Infinity}', "Infinity is not a JSON number"),
        (
            '{"api": "Heartbeat", "delay_ms": 1, "times": 1e300}',
            "rule key 'times': 1e+300 is not between",
        ),
        ('{"api": "Heartbeat", "delay_ms": NaN}', "NaN is not a JSON number"),
        ('{"api": "Heartbeat", "delay_ms": 1, "version": 1e20}', "version"),
        ("[" * 100_000, "nested too deep"),
    ],
)
def test_unchecked_values_in_a_rules_file_are_usage_errors(tmp_path, capsys, rule, text):
    path = tmp_path / "rules.json"
    path.write_text(rule if rule.startswith("[[") else '{"rules": [' + rule + "]}")
    assert main(["proxy", "--upstream", "127.0.0.1:1", "--rules", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and text in err and "unexpected error" not in err, err


# ---------------------------------------------------------------- escapes


HOSTILE = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202eevil\u2028x"


def test_capture_fields_cannot_reach_the_terminal_raw(tmp_path, capsys):
    path = jsonl_with(tmp_path, client=HOSTILE, fault=HOSTILE)
    assert main(["explain", "--capture", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\\x1b[2J" in out and "\\u202e" in out
    assert not any(c in out for c in "\x1b\x07\x9b\u202e\u2028")


def test_json_lines_are_ascii(tmp_path):
    ex = exchange(1, client=HOSTILE, client_id=HOSTILE[:20])
    ex.fault = HOSTILE
    line = exchange_json(ex)
    assert line.isascii() and json.loads(line)["fault"] == HOSTILE
    assert not any(c in exchange_line(ex) for c in "\x1b\x07\x9b\u202e\u2028")
    path = tmp_path / "t.jsonl"
    with CaptureWriter(path) as w:
        w.write(ex)
    text = path.read_bytes()
    assert text.isascii()
    assert read_jsonl(path).__next__().fault == HOSTILE


# ---------------------------------------------------------------- rules that never match


@pytest.mark.parametrize(
    "spec, text",
    [
        ("api=Heartbeat,version=9-2,delay_ms=1", "the range is empty"),
        ("api=Heartbeat,version=99,delay_ms=1", "Heartbeat has versions 0-4"),
        ("api=Heartbeat,version=40+,delay_ms=1", "Heartbeat has versions 0-4"),
        (f"api=Heartbeat,version={10**20},delay_ms=1", "a version is from 0 to 32767"),
        ("version=10^20,delay_ms=1", "not a version or range"),
        ("api=Fetch,version=0-6,error=NOT_COORDINATOR", "no top-level error_code"),
        ("api=ListOffsets,error=NOT_COORDINATOR", "no top-level error_code"),
    ],
)
def test_rules_that_could_never_match_are_refused(spec, text):
    with pytest.raises(RuleError, match=text):
        Rule.parse(spec)


def test_fetch_error_rules_answer_from_v7():
    """Fetch v7+ has a top-level error code, so an error rule on Fetch is accepted and
    answers those versions; a rule limited to older versions is refused."""
    from fastkwire.proxy._faults import error_answer

    rule = Rule.parse("api=Fetch,error=NOT_COORDINATOR")
    for version, answers in ((6, False), (7, True), (12, True)):
        req = fk.encode_request(fk.FetchRequest(max_wait_ms=1, min_bytes=1), version, 3, "c")
        ex = Exchange(1, "c", request_header(req), req)
        if answers:
            _, msg = fk.decode_response(error_answer(ex, rule.error_code), 1, version)
            assert msg.error_code == fk.error_codes.by_name("NOT_COORDINATOR").code
        else:
            with pytest.raises(ValueError, match="cannot carry the error"):
                error_answer(ex, rule.error_code)


# ---------------------------------------------------------------- error codes from bytes


def numbered_error_codes(d, counter):
    """The full dict with each error_code a different code (1, 2, 3, ...; some repeated)."""
    if isinstance(d, dict):
        return {
            k: (next(counter) % 7 + 1 if k == "error_code" else numbered_error_codes(v, counter))
            for k, v in d.items()
        }
    if isinstance(d, list):
        return [numbered_error_codes(v, counter) for v in d]
    return d


def error_codes_agree(varied):
    import itertools

    checked = 0
    for name, version in D.message_versions():
        cls = getattr(fk, name)
        if cls.KIND != "response":
            continue
        full = D.full_dict(name, version)
        dicts = [full, numbered_error_codes(full, itertools.count())]
        if varied and version == cls.MAX_VERSION:
            dicts += D.sampled_dicts(name, version, varied)
        for d in dicts:
            frame = fk.encode_response(cls.from_dict(d), version, 9)
            _, msg = fk.decode_response(frame, cls.API_KEY, version)
            got = response_error_codes(frame, cls.API_KEY, version)
            assert sorted(got) == sorted(collect_error_codes(msg)), (name, version)
            assert len(set(got)) == len(got)
            checked += 1
            for cut in range(8, len(frame), max(1, len(frame) // 7)):
                response_error_codes(frame[:cut], cls.API_KEY, version)
    return checked


def test_error_codes_read_from_bytes_agree_with_the_decoded_message():
    """Every response and version with every field set, its error codes all 1 and then
    numbered apart: the codes read from the bytes are the decoded message's; cut frames
    never raise. With --run-slow, also varied values (the fuzzers' strategies)."""
    assert error_codes_agree(varied=0) > 700


@pytest.mark.slow
def test_error_codes_agree_on_varied_messages():
    assert error_codes_agree(varied=20) > 2000


def test_error_codes_of_a_huge_answer_cost_a_bounded_walk():
    """A ListGroups answer of 200,000 groups: its top-level error code is read, and the walk
    stops after MAX_STEPS values instead of visiting every group."""
    from fastkwire.proxy import _error_scan

    L = fk.ListGroupsResponse
    groups = [L.ListedGroup(group_id=f"g{i}", protocol_type="consumer") for i in range(200_000)]
    frame = fk.encode_response(L(error_code=15, groups=groups), 4, 1)
    visits = []
    real = _error_scan._Scan.tick

    def counted(self):
        visits.append(1)
        real(self)

    _error_scan._Scan.tick = counted
    try:
        assert response_error_codes(frame, L.API_KEY, 4) == [15]
    finally:
        _error_scan._Scan.tick = real
    assert len(visits) == _error_scan.MAX_STEPS + 1


def test_library_reader_signature_keeps_port_positional(tmp_path):
    pytest.importorskip("dpkt")
    path = written_pcap(tmp_path / "t.pcap", [exchange(1)])
    assert len(read_capture(path, UPSTREAM[1])) == len(read_capture(os.fspath(path))) == 1


# ---------------------------------------------------------------- mutated files


def mutations(data, rng, n):
    """n mutated copies of data: flipped bytes, cuts, insertions, duplicated chunks, and
    size-like fields set to extremes."""
    for _ in range(n):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(5)
            at = rng.randrange(len(b)) if b else 0
            if kind == 0 and b:
                b[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                del b[at:]
            elif kind == 2:
                b[at:at] = rng.randbytes(rng.randint(1, 16))
            elif kind == 3 and b:
                end = min(len(b), at + rng.randint(1, 200))
                b[at:at] = b[at:end]
            elif b:
                b[at : at + 4] = rng.choice(
                    [b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00"]
                )
        yield bytes(b)


@pytest.mark.parametrize("kind", ["pcap", "pcapng", "jsonl"])
def test_mutated_captures_read_or_fail_cleanly(tmp_path, kind):
    """Mutated captures: each reads (with warnings, maybe) or is a CaptureError; never
    another exception. 300 per kind here, 20,000 with --run-slow."""
    mutated_captures(tmp_path, kind, 300)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pcap", "pcapng", "jsonl"])
def test_mutated_captures_long(tmp_path, kind):
    mutated_captures(tmp_path, kind, 20_000)


def mutated_captures(tmp_path, kind, count):
    dpkt = pytest.importorskip("dpkt")
    exchanges = [exchange(i) for i in range(10)]
    path = tmp_path / f"seed.{kind}"
    if kind == "jsonl":
        with CaptureWriter(path) as w:
            for ex in exchanges:
                w.write(ex)
    else:
        written_pcap(tmp_path / "seed.pcap", exchanges)
        if kind == "pcapng":
            with open(tmp_path / "seed.pcap", "rb") as f, open(path, "wb") as out:
                w = dpkt.pcapng.Writer(out, linktype=dpkt.pcap.DLT_EN10MB)
                for ts, buf in dpkt.pcap.Reader(f):
                    w.writepkt(buf, float(ts))
    seed = path.read_bytes()
    assert len(list(read_capture(path))) == 10
    rng = random.Random(kind)
    target = tmp_path / f"mutated.{kind}"
    outcomes = {"read": 0, "error": 0, "warned": 0}
    for data in mutations(seed, rng, count):
        target.write_bytes(data)
        warned = []
        try:
            list(read_capture(target, None, warned.append))
            outcomes["read"] += 1
        except CaptureError:
            outcomes["error"] += 1
        outcomes["warned"] += bool(warned)
    assert outcomes["read"] and outcomes["error"] and outcomes["warned"], outcomes


def test_read_pcap_of_a_file_that_is_no_pcap(tmp_path):
    pytest.importorskip("dpkt")
    from fastkwire.proxy import read_pcap

    path = tmp_path / "x.pcap"
    path.write_bytes(b"GIF89a" + b"\x00" * 40)
    with pytest.raises(CaptureError, match="not a pcap or pcapng file"):
        read_pcap(path)


@pytest.mark.parametrize(
    "client_id, fault, latency, local",
    [
        ("producer-1", None, 0.000123456, False),
        (None, 'quote " and é', None, True),
        ("\u2603 snow", "delay", 2.5, False),
    ],
)
def test_a_capture_line_is_the_json_of_its_record(tmp_path, client_id, fault, latency, local):
    # The line is formatted by hand (it is written per exchange): it must be exactly what
    # json gives for record_of, whatever the strings hold.
    from fastkwire.proxy._capture import record_of

    req, _ = api_versions_pair(7, client_id)
    ex = Exchange(2, "127.0.0.1:5000", request_header(req), req, broker="b\u00e9:9092")
    ex.fault, ex.local = fault, local
    ex.response = b"\0\0\0\x04\0\0\0\x07"
    ex.finished = None if latency is None else ex.started + latency
    path = tmp_path / "c.jsonl"
    with CaptureWriter(str(path)) as w:
        w.write(ex)
    line = path.read_text().rstrip("\n")
    expected = dict(record_of(ex), request=req.hex(), response=ex.response.hex())
    assert line == json.dumps(expected)
    assert json.loads(line)["client_id"] == client_id
