"""pcap: the proxy writes its traffic as a pcap file (`--pcap`) that reads back as the same
exchanges, with valid IP and TCP checksums; and a capture that tcpdump takes on the
loopback of real clients' traffic through the proxy reads back (`explain --capture`,
`stats`) as the exchanges the proxy saw. The tcpdump test skips, saying why, where tcpdump
is missing or may not capture."""

import gc
import getpass
import importlib.util
import shutil
import subprocess
import time

import pytest

from fastkwire.cli import main
from fastkwire.proxy import BackgroundProxy
from fastkwire.proxy import CaptureWriter, capture_kind, read_capture

from broker import tansu_broker  # noqa: F401
from test_proxy_cli import produce_and_consume

dpkt = pytest.importorskip("dpkt", reason="the pcap extra (dpkt) is not installed")
# confluent-kafka has no wheel for free-threaded builds; kafka-python's clients still run there.
HAVE_LIBRDKAFKA = importlib.util.find_spec("confluent_kafka") is not None

pytestmark = pytest.mark.broker
TCPDUMP_START = 10.0
CAPTURE_CATCH_UP = 15.0  # seconds tcpdump may be behind on a busy machine


def pairs(exchanges):
    return sorted((e.request, e.response or b"") for e in exchanges)


def test_written_pcap_reads_back_as_the_same_exchanges(tansu_broker, tmp_path):
    from fastkwire.proxy import PcapWriter

    pcap, jsonl = tmp_path / "traffic.pcap", tmp_path / "traffic.jsonl"
    upstream = ("127.0.0.1", tansu_broker.port)
    with CaptureWriter(jsonl) as record:
        writer = PcapWriter(pcap, upstream)

        def both(ex):
            record.write(ex)
            writer.write(ex)

        with BackgroundProxy(
            tansu_broker.bootstrap, rewrite_advertised=True, on_exchange=both
        ) as proxy:
            produce_and_consume(proxy.bootstrap, "pcap-written")
        writer.close()
    assert capture_kind(pcap) == "pcap" and capture_kind(jsonl) == "jsonl"
    recorded = list(read_capture(jsonl))
    back = list(read_capture(pcap, port=tansu_broker.port))
    assert len(back) == len(recorded) > 10
    assert pairs(back) == pairs(recorded)
    # Each connection is one stream, its requests in order.
    by_stream = {}
    for e in back:
        by_stream.setdefault(e.conn, []).append(e.request)
    by_conn = {}
    for e in recorded:
        by_conn.setdefault(e.conn, []).append(e.request)
    assert sorted(by_stream.values()) == sorted(by_conn.values())
    for e in back:
        assert e.response is None or e.latency_ms >= 0

    # What Wireshark checks: Ethernet, IPv4 and TCP headers with valid checksums.
    with open(pcap, "rb") as f:
        reader = dpkt.pcap.Reader(f)
        assert reader.datalink() == dpkt.pcap.DLT_EN10MB
        packets = 0
        for _, buf in reader:
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = ip.data
            assert isinstance(tcp, dpkt.tcp.TCP)
            ip_sum, tcp_sum = ip.sum, tcp.sum
            ip.sum = tcp.sum = 0
            again = dpkt.ip.IP(bytes(ip))
            assert (again.sum, again.data.sum) == (ip_sum, tcp_sum)
            packets += 1
    assert packets > 2 * len(back)

    # The same packets as pcapng (Wireshark's own format) read back the same.
    pcapng = tmp_path / "traffic.pcapng"
    with open(pcap, "rb") as f, open(pcapng, "wb") as g:
        writer = dpkt.pcapng.Writer(g, snaplen=65535, linktype=dpkt.pcap.DLT_EN10MB)
        for ts, buf in dpkt.pcap.Reader(f):
            writer.writepkt(buf, float(ts))
    assert capture_kind(pcapng) == "pcap"
    assert pairs(read_capture(pcapng, port=tansu_broker.port)) == pairs(recorded)


def start_tcpdump(path, port):
    binary = shutil.which("tcpdump")
    if binary is None:
        pytest.skip("tcpdump is not installed (apt-get install tcpdump)")
    # -Z: write as this user (tcpdump drops to its own user, which cannot write in tmp_path);
    # --immediate-mode: packets are written as they come, not when a kernel block fills.
    proc = subprocess.Popen(
        [
            binary,
            "-i",
            "lo",
            "--immediate-mode",
            "-U",
            "-s",
            "0",
            "-Z",
            getpass.getuser(),
            "-w",
            str(path),
            f"tcp port {port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + TCPDUMP_START
    line = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "listening on" in line:
            return proc
        if proc.poll() is not None:
            break
    proc.kill()
    rest = proc.communicate()[1]
    pytest.skip(f"tcpdump cannot capture on the loopback here: {(line + rest).strip()[:300]}")


def missing_from(pcap, port, exchanges):
    """(api, correlation id, connection) of the exchanges the proxy saw answered that the
    capture, as far as its file holds them now, lacks: neither the pair, nor the last
    request of its connection left unanswered there (a client that closed before its answer came, as
    librdkafka does with its last request when destroyed: the proxy got the answer from
    upstream, the client never did). While tcpdump writes the file a last packet may be cut:
    then everything is missing."""
    try:
        captured = list(read_capture(pcap, port=port))
    except Exception:  # noqa: BLE001 - a file still being written
        captured = []
    pairs_seen = set(pairs(captured))
    last = {}  # each connection's last request: the only one its client may leave unanswered
    for e in captured:
        last[e.conn] = e
    unanswered = {e.request for e in last.values() if e.response is None}
    return [
        (e.api, e.correlation_id, e.conn)
        for e in exchanges
        if e.response is not None
        and (e.request, e.response) not in pairs_seen
        and e.request not in unanswered
    ]


def test_tcpdump_capture_of_real_clients(tansu_broker, tmp_path, capsys):
    pcap = tmp_path / "tcpdump.pcap"
    with BackgroundProxy(tansu_broker.bootstrap, rewrite_advertised=True) as proxy:
        tcpdump = start_tcpdump(pcap, proxy.port)
        try:
            produce_and_consume(proxy.bootstrap, "pcap-tcpdump")
            if HAVE_LIBRDKAFKA:  # a second client's framing, where its wheel exists
                from confluent_kafka import Producer

                producer = Producer(
                    {"bootstrap.servers": proxy.bootstrap, "compression.type": "zstd"}
                )
                producer.produce("pcap-tcpdump", b"from librdkafka")
                assert producer.flush(15) == 0
                # Destroyed before the capture stops: a live librdkafka refreshes its metadata
                # on its own, and an exchange after tcpdump ends is one the capture cannot have.
                del producer
                gc.collect()
            # tcpdump writes each packet as it reads it, but on a busy machine it may be a
            # while behind: the capture stops once it holds every exchange answered.
            deadline = time.monotonic() + CAPTURE_CATCH_UP
            while missing_from(pcap, proxy.port, proxy.exchanges()):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            tcpdump.terminate()
            _, said = tcpdump.communicate(timeout=10)
        seen = proxy.exchanges()
    back = list(read_capture(pcap, port=proxy.port))
    assert pairs(read_capture(pcap)) == pairs(back)  # the broker's end told by the handshakes
    # Everything the proxy answered is in the capture, paired by correlation id (tcpdump
    # says how many packets the kernel dropped, if any).
    assert not missing_from(pcap, proxy.port, seen), said
    assert len(back) == len(seen)
    assert main(["explain", "--capture", str(pcap), "--port", str(proxy.port)]) == 0
    out, err = capsys.readouterr()
    assert out.count("=== ") == len(seen) and f"{len(seen)} exchanges" in err
    assert "ProduceRequest" in out and "FetchResponse" in out
    assert main(["stats", str(pcap), "--port", str(proxy.port)]) == 0
    out, _ = capsys.readouterr()
    assert "Produce" in out and f"{len(seen)} exchanges" in out


def test_without_dpkt_the_error_names_the_extra(tmp_path, monkeypatch):
    from fastkwire.proxy import PcapWriter, _pcap

    pcap = tmp_path / "x.pcap"
    pcap.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20))
    monkeypatch.setattr(_pcap, "dpkt", None)
    with pytest.raises(ImportError, match=r"fastkwire\[pcap\]"):
        PcapWriter(tmp_path / "y.pcap", ("127.0.0.1", 9092))
    with pytest.raises(ImportError, match=r"fastkwire\[pcap\]"):
        list(read_capture(pcap))
    assert main(["stats", str(pcap)]) == 2


def test_unreadable_captures_name_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request": "00000004"}\n')
    assert main(["stats", str(bad)]) == 2
    assert f"{bad}: line 1: the request is too short" in capsys.readouterr().err
    bad.write_text(
        '{"request": "00000002ffff", "api_key": 18, "version": 3, "correlation_id": 1}\nnot json\n'
    )
    assert main(["stats", str(bad)]) == 2
    assert f"{bad}: line 2: not JSON" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert main(["explain", "--capture", str(empty)]) == 2
    assert "the file is empty" in capsys.readouterr().err
    other = tmp_path / "other.bin"
    other.write_bytes(b"\x00\x01\x02\x03")
    assert main(["stats", str(other)]) == 2
    assert "neither a fastkwire capture" in capsys.readouterr().err
    broken = tmp_path / "broken.pcap"
    broken.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x02")
    assert main(["stats", str(broken)]) == 2
    assert "not a readable pcap" in capsys.readouterr().err
