"""`fastkwire dump`: log segments and a real broker (fastkwire's own, loaded by kafka-python's
producer) to Parquet, JSON lines and CSV; the rows against read_segments and kafka-python's
own consumer; errors naming flags; the progress line."""

import base64
import csv
import io
import json
import os
import time

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
import pyarrow.parquet as pq  # noqa: E402

import fastkwire  # noqa: E402
from fastkwire import _dump_cli, records  # noqa: E402
from fastkwire.cli import main  # noqa: E402
from fastkwire.records import Record  # noqa: E402

from broker import kafka_broker  # noqa: E402, F401 - a fixture

T0 = 1_700_000_000_000


def rows_of(i):
    key = None if i % 5 == 0 else b"k%d" % i
    value = b"" if i % 7 == 0 else (None if i % 11 == 0 else b"value %d \xe2\x82\xac" % i)
    headers = [("i", b"%d" % i)] + ([("none", None)] if i % 3 == 0 else [])
    return key, value, headers


@pytest.fixture
def log(tmp_path):
    """Two partitions of topic "orders.v1", 30 and 12 records, a few batches each."""
    for partition, n in ((0, 30), (1, 12)):
        d = tmp_path / "logs" / f"orders.v1-{partition}"
        d.mkdir(parents=True)
        data = b""
        for base in range(0, n, 5):
            recs = [Record(None, T0 + o, *rows_of(o)) for o in range(base, min(base + 5, n))]
            data += records.write_batch(recs, base_offset=base)
        (d / "00000000000000000000.log").write_bytes(data)
    return tmp_path / "logs"


def dump(*argv):
    """The command's exit code (argparse's own usage errors exit)."""
    try:
        return main(["dump", *map(str, argv)])
    except SystemExit as e:
        return e.code


def test_parquet_is_the_table(log, tmp_path):
    out = tmp_path / "out.parquet"
    assert dump("--segments", log, "--to", out) == 0
    assert pq.read_table(out).equals(fastkwire.read_segments(log))
    # --partition and --start/--end as offsets.
    assert dump("--segments", log, "--to", out, "--partition", "0", "--start", 3, "--end", 9) == 0
    assert pq.read_table(out).column("offset").to_pylist() == [3, 4, 5, 6, 7, 8]


def test_jsonl_and_csv(log, tmp_path):
    table = fastkwire.read_segments(log).to_pylist()
    assert dump("--segments", log, "--to", tmp_path / "o.jsonl", "--bytes", "base64") == 0
    lines = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]

    def unb64(v):
        return None if v is None else base64.b64decode(v)

    assert [
        {
            **row,
            "key": unb64(row["key"]),
            "value": unb64(row["value"]),
            "headers": [(k, unb64(v)) for k, v in row["headers"]],
        }
        for row in lines
    ] == table
    # Text: UTF-8 as it is.
    assert dump("--segments", log, "--to", tmp_path / "t.jsonl") == 0
    first = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[1])
    assert first["value"] == "value 1 €" and first["headers"] == [["i", "1"]]
    # CSV: null and b"" stay apart (null unquoted and empty, "" quoted), headers as JSON.
    assert dump("--segments", log, "--to", tmp_path / "o.csv", "--bytes", "hex") == 0
    text = (tmp_path / "o.csv").read_text()
    lines = text.splitlines()
    assert (
        lines[0]
        == '"offset","key","value","topic","partition","timestamp","timestamp_type","headers"'
    )
    assert lines[1].startswith('0,,"",') and lines[12].startswith('11,"6b3131",,')
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [bytes.fromhex(r["key"]) if r["key"] else None for r in parsed][:3] == [
        None,
        b"k1",
        b"k2",
    ]
    assert json.loads(parsed[3]["headers"]) == [["i", "33"], ["none", None]]


def test_not_utf8_names_the_record_and_the_flag(tmp_path, capsys):
    d = tmp_path / "t-0"
    d.mkdir()
    good = [Record(None, T0, None, b"fine")] * 3
    (d / "00000000000000000000.log").write_bytes(
        records.write_batch(good)
        + records.write_batch([Record(None, T0, None, b"\xff")], base_offset=3)
    )
    out = tmp_path / "o.jsonl"
    assert dump("--segments", d, "--to", out) == 2
    err = capsys.readouterr().err
    assert "--bytes text: the value of t-0 offset 3 is not UTF-8" in err and "--bytes base64" in err
    assert not out.exists() and os.listdir(tmp_path) == ["t-0"]  # nothing half-written
    assert dump("--segments", d, "--to", out, "--bytes", "hex") == 0
    assert json.loads(out.read_text().splitlines()[3])["value"] == "ff"


def test_a_bad_segment_fails_whole(log, tmp_path, capsys):
    seg = log / "orders.v1-1" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[-3] ^= 1
    seg.write_bytes(data)
    out = tmp_path / "out.parquet"
    assert dump("--segments", log, "--to", out) == 3
    err = capsys.readouterr().err
    assert f"{seg}: CRC32C mismatch" in err and "byte offset" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--to", "x.parquet"], "--bootstrap-server and --topic, or --segments"),
        (
            ["--bootstrap-server", "127.0.0.1:1", "--to", "x.parquet"],
            "--bootstrap-server needs --topic",
        ),
        (["--segments", "{log}", "--topic", "t", "--to", "x.parquet"], "--segments reads files"),
        (["--segments", "{log}", "--to", "x.txt"], "--to 'x.txt': cannot tell the format"),
        (["--segments", "{log}", "--to", "x.parquet", "--start", "latest"], "--start latest"),
        (
            ["--segments", "{log}", "--to", "x.parquet", "--start", "yesterday"],
            "--start: not an offset",
        ),
        (
            ["--segments", "{log}", "--to", "x.parquet", "--partition", "a"],
            "--partition: not a partition",
        ),
        (["--segments", "{log}/nope", "--to", "x.parquet"], "no such segment file or directory"),
        (["--segments", "{log}", "--to", "x.parquet", "--timeout", "0"], "--timeout 0"),
        (
            ["--segments", "{log}", "--to", "x.parquet", "--start", "9", "--end", "3"],
            "--start 9 is after --end 3",
        ),
    ],
)
def test_usage_errors_name_flags(log, tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code = dump(*[a.format(log=log) for a in argv])
    assert code in (2, 3)
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_time_range(log, tmp_path):
    out = tmp_path / "o.parquet"
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((T0 + 4000) / 1000))
    # Offset o has the timestamp T0 + o ms: 4 s past T0 is after every record.
    assert dump("--segments", log, "--to", out, "--start", start + "Z") == 0
    assert pq.read_table(out).num_rows == 0
    assert (
        dump(
            "--segments",
            log,
            "--to",
            out,
            "--start",
            "2023-11-14T22:13:20.010Z",
            "--end",
            "2023-11-14T22:13:20.020+00:00",
        )
        == 0
    )
    # Partition 0's offsets 10-19, and partition 1's 10-11 (all it has from 10 on).
    assert pq.read_table(out).column("offset").to_pylist() == [*range(10, 20), 10, 11]


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_line():
    now = [100.0]
    planned = {("orders", 0): 10, ("orders", 1): None}
    tty = Tty()
    p = _dump_cli.Progress(tty, planned, clock=lambda: now[0])
    rows = pa.RecordBatch.from_pylist(
        [
            {
                "offset": i,
                "key": None,
                "value": b"x" * 100,
                "topic": "orders",
                "partition": 0,
                "timestamp": 0,
                "timestamp_type": 1,
                "headers": [],
            }
            for i in range(4)
        ],
        schema=fastkwire._arrow_rows.SCHEMA,
    )
    now[0] = 101.0
    p.add(rows)
    assert tty.getvalue().startswith("\r\x1b[K4 records, ")
    assert "orders-0 4/10" in tty.getvalue() and "orders-1 0" in tty.getvalue()
    assert "/s" in tty.getvalue()
    p.finish()
    assert tty.getvalue().endswith("\n")
    # Not a terminal: nothing at all.
    quiet = io.StringIO()
    p = _dump_cli.Progress(quiet, planned, clock=lambda: now[0])
    now[0] = 200.0
    p.add(rows)
    p.finish()
    assert quiet.getvalue() == ""


def test_dump_of_segments_prints_nothing_when_piped(log, tmp_path, capsys):
    assert dump("--segments", log, "--to", tmp_path / "o.parquet") == 0
    assert capsys.readouterr() == ("", "")


def test_stdout(log, capfdbinary):
    assert dump("--segments", log / "orders.v1-1", "--to", "-", "--format", "jsonl") == 0
    out = capfdbinary.readouterr().out.decode().splitlines()
    assert [json.loads(x)["offset"] for x in out] == list(range(12))


# ---------------------------------------------------------------- a real broker


def test_a_topic_from_a_broker_is_what_kafka_python_consumes(kafka_broker, tmp_path):  # noqa: F811
    kafka = pytest.importorskip("kafka")
    from kafka.structs import TopicPartition

    topic = f"dump-{os.getpid()}-{time.monotonic_ns()}"
    bootstrap = kafka_broker.bootstrap_servers
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([kafka.admin.NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    n = 60
    for i in range(n):
        key, value, headers = rows_of(i)
        # kafka-python's producer takes neither a null header value nor a record with
        # both key and value null.
        headers = [(k, v if v is not None else b"") for k, v in headers]
        value = b"" if key is None and value is None else value
        producer.send(
            topic, key=key, value=value, headers=headers, partition=i % 2, timestamp_ms=T0 + i
        )
    producer.flush(30)
    producer.close(30)

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    seen = []
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + 30
        while len(seen) < n and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=200).values():
                seen += [
                    (
                        r.partition,
                        r.offset,
                        r.key,
                        r.value,
                        r.timestamp,
                        [tuple(h) for h in r.headers],
                    )
                    for r in recs
                ]
    finally:
        consumer.close()
    assert len(seen) == n

    out = tmp_path / "topic.parquet"
    assert (
        dump("--bootstrap-server", bootstrap, "--topic", topic, "--to", out, "--timeout", 10) == 0
    )
    table = pq.read_table(out)
    dumped = sorted(
        (r["partition"], r["offset"], r["key"], r["value"], r["timestamp"], r["headers"])
        for r in table.to_pylist()
    )
    assert dumped == sorted(seen)
    assert set(table.column("topic").to_pylist()) == {topic}
    # A partition and an offset range; an unknown topic is named.
    assert (
        dump(
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--to",
            out,
            "--partition",
            1,
            "--start",
            2,
            "--end",
            5,
        )
        == 0
    )
    assert pq.read_table(out).column("offset").to_pylist() == [2, 3, 4]


def test_broker_errors_name_what(kafka_broker, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "x.parquet"
    assert (
        dump(
            "--bootstrap-server",
            kafka_broker.bootstrap_servers,
            "--topic",
            "no-such-topic-here",
            "--to",
            out,
            "--timeout",
            5,
        )
        == 3
    )
    assert "no-such-topic-here" in capsys.readouterr().err and not out.exists()
    assert (
        dump(
            "--bootstrap-server",
            kafka_broker.bootstrap_servers,
            "--topic",
            "t",
            "--to",
            out,
            "--sasl-username",
            "u",
            "--sasl-password",
            "p",
        )
        == 2
    )
    assert "--security-protocol SASL_SSL" in capsys.readouterr().err


# ---------------------------------------------------------------- pipes, folders, extras


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_closed_pipe_ends_dump_quietly_with_141(tmp_path, fmt):
    # `fastkwire dump ... --to - | head -1` printed "error: [Errno 32] Broken pipe" and
    # exited 3; its help promises 141, as every other command's does.
    import subprocess
    import sys

    from fastkwire.cli import EXIT_CLOSED_PIPE

    d = tmp_path / "big-0"
    d.mkdir()
    data = b"".join(
        records.write_batch(
            [Record(None, T0, b"k", os.urandom(100).hex().encode(), []) for _ in range(1000)],
            base_offset=b * 1000,
        )
        for b in range(10)
    )  # 2 MB of values that do not compress: far more than a pipe holds, in any format
    (d / "00000000000000000000.log").write_bytes(data)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "dump", "--segments", d, "--to", "-", "--format", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.read(100)  # then the reader goes away, as `| head -c 100` does
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert len(first) == 100 and (proc.wait(timeout=60), err) == (EXIT_CLOSED_PIPE, "")


def test_an_output_folder_that_is_not_there_is_bad_usage(log, tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    assert dump("--segments", log, "--to", missing / "x.parquet") == 2
    err = capsys.readouterr().err
    assert f"--to {missing / 'x.parquet'}: there is no folder {missing}" in err
    assert ".partial" not in err and not missing.exists()
    # A folder that cannot be written in names the folder too.
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root writes anywhere
            pytest.skip("this user can write in any folder")
        assert dump("--segments", log, "--to", locked / "x.parquet") == 2
        err = capsys.readouterr().err
        assert f"cannot write in the folder {locked}" in err and ".partial" not in err
    finally:
        locked.chmod(0o700)


def test_dump_without_pyarrow_names_the_extra(log, tmp_path):
    from test_optional_extras import BLOCK

    code = (
        BLOCK.format(blocked={"pyarrow"})
        + "import sys\nfrom fastkwire.cli import main\n"
        + f"sys.exit(main(['dump', '--segments', {str(log)!r}, '--to', {str(tmp_path / 'o.csv')!r}]))\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "fastkwire dump: error: fastkwire.segments needs pyarrow and numpy (no pyarrow): "
        "pip install 'fastkwire[arrow]'\n"
    )


def test_to_a_folder_is_bad_usage_naming_it(log, tmp_path, capsys):
    """--to a folder once wrote a .partial beside it, then failed to move it there (exit 3,
    naming the temporary file)."""
    folder = tmp_path / "out"
    folder.mkdir()
    assert dump("--segments", log, "--to", folder, "--format", "csv") == 2
    err = capsys.readouterr().err
    assert f"--to {folder}: is a folder" in err and ".partial" not in err
    assert list(tmp_path.glob("*.partial")) == [] and list(folder.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_to_a_named_pipe_or_device_is_written_to_not_replaced(log, tmp_path):
    """--to /dev/null (or a named pipe) once had a regular file moved over it: as root,
    `--to /dev/null` replaced the device. What is not a regular file is written to."""
    import threading

    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    got = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()), daemon=True)
    reader.start()
    try:
        assert dump("--segments", log, "--to", pipe, "--partition", "1") == 0
    finally:
        if reader.is_alive():  # the dump never opened the pipe: let the reader end
            with open(pipe, "wb"):
                pass
        reader.join(10)
    assert pipe.is_fifo() and list(tmp_path.glob("*.partial")) == []
    assert [json.loads(x)["offset"] for x in got[0].splitlines()] == list(range(12))


def test_to_a_file_being_read_is_bad_usage(log, capsys):
    """--to one of the --segments' own files once replaced it with the dump, after
    reading it: the segment was gone."""
    segment = log / "orders.v1-0" / "00000000000000000000.log"
    before = segment.read_bytes()
    index = segment.with_suffix(".index")
    index.write_bytes(b"")  # the offset index beside it, read too
    for given, to in ((segment, segment), (log, segment), (segment, index)):
        assert dump("--segments", given, "--to", to, "--format", "csv") == 2
        err = capsys.readouterr().err
        assert f"--to {to}: is a file of --segments {given}" in err
        assert segment.read_bytes() == before and index.read_bytes() == b""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_as_a_segment_is_refused_naming_it(tmp_path, capsys):
    """A FIFO would be read until a writer came (or was silently left out): refused."""
    d = tmp_path / "orders-0"
    d.mkdir()
    fifo = d / "00000000000000000000.log"
    os.mkfifo(fifo)
    for given in (fifo, d, tmp_path):
        assert dump("--segments", given, "--to", tmp_path / "o.jsonl") == 2
        err = capsys.readouterr().err
        assert f"{fifo} is not a regular file or a directory (a FIFO" in err, err
