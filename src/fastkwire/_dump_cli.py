"""`fastkwire dump`: a topic (through a broker) or Kafka log segments (files) to a Parquet,
JSON-lines or CSV file (cli adds it to its parser, with the admin commands' security flags).

    fastkwire dump --bootstrap-server B --topic T --to out.parquet
    fastkwire dump --segments /var/lib/kafka/data/orders-0 --to out.jsonl --start 2026-12-01T00:00

The rows are read_kafka's (offset, key, value, topic, partition, timestamp, timestamp_type,
headers). Parquet keeps them as they are; JSON lines and CSV write bytes as `--bytes`
says (text: UTF-8, a value that is not is an error naming it; base64; hex), headers as
[[key, value], ...], null as null (JSON) or an unquoted empty field (CSV: an empty value
is ""). The output is written beside its name and moved into place when the dump is
whole: a failed dump leaves no file that looks complete.

Exit codes: 0 written, 2 bad usage (a flag, an output folder that is not there, a missing
extra), 3 the read failed (broker, bad segment, bad bytes); 141 when the reader of `--to -`
goes away (`| head`), quietly, as cli's other commands.
"""

import argparse
import base64
import json
import os
import re
import sys
import tempfile
import time
from datetime import datetime, timezone

from ._printable import os_error_text, printable

EXIT_OK, EXIT_USAGE, EXIT_FAILED = 0, 2, 3
FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
}
BYTES = ("text", "base64", "hex")
PROGRESS_INTERVAL = 0.2  # seconds between redraws of the progress line
# The library's parameter -> the flag, for the errors the readers raise.
DUMP_FLAGS = {
    "start_offset": "--start",
    "end_offset": "--end",
    "isolation_level": "--isolation-level",
    "bootstrap_servers": "--bootstrap-server",
}
_PARAMETER = re.compile(r"\b(" + "|".join(DUMP_FLAGS) + r")\b")
# The readers' advice in the library's words -> in the command line's.
DUMP_ADVICE = {'truncated="skip"': "--truncated skip"}


class UsageError(ValueError):
    """A flag that cannot work (exit 2)."""


# ---------------------------------------------------------------- flags


def _position(text):
    """--start/--end: an offset, earliest/latest, or an ISO 8601 time (UTC unless it says)."""
    if text.isascii() and text.isdigit():
        return int(text)
    if text in ("earliest", "latest"):
        return text
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an offset, earliest, latest or an ISO time (2026-12-01T12:00:00Z): {text!r}"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _partitions(text):
    out = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):
            raise argparse.ArgumentTypeError(f"not a partition number: {part!r}")
        out.append(int(part))
    return out


def add_dump(subparsers, *, security, flags):
    """Add `dump` to a subparsers object; `security(args, warn)` turns the security flags
    (which the caller adds to the returned parser) into the connection's options, `flags`
    names each option's flag for its errors."""
    parser = subparsers.add_parser(
        "dump",
        allow_abbrev=False,
        help="write a topic or Kafka log segments to Parquet, JSON lines or CSV",
        description="Read a topic from a broker (--bootstrap-server, --topic), or Kafka's "
        "log segment files (--segments), and write the records to --to.",
    )
    source = parser.add_argument_group("what to read (a broker, or segment files)")
    source.add_argument("--bootstrap-server", metavar="HOST:PORT", help="brokers to start from")
    source.add_argument("--topic", action="append", metavar="T", help="a topic (repeatable)")
    source.add_argument(
        "--segments",
        nargs="+",
        metavar="PATH",
        help="segment files (.log), partition directories (topic-N), broker log directories, "
        "or pyarrow filesystem URIs (s3://, gs://, file://)",
    )
    parser.add_argument("--to", required=True, metavar="FILE", help="the output file (- : stdout)")
    parser.add_argument(
        "--format", choices=("parquet", "jsonl", "csv"), help="default: from --to's extension"
    )
    parser.add_argument(
        "--start",
        type=_position,
        metavar="POS",
        help="first offset, or ISO time (default: earliest)",
    )
    parser.add_argument(
        "--end",
        type=_position,
        metavar="POS",
        help="offset or ISO time to stop before (default: latest)",
    )
    parser.add_argument(
        "--partition",
        type=_partitions,
        action="append",
        metavar="N[,N]",
        help="partitions to read (default: all)",
    )
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
    )
    parser.add_argument(
        "--bytes",
        choices=BYTES,
        default="text",
        dest="bytes_as",
        help="how jsonl and csv write keys, values and header values (default: text, UTF-8)",
    )
    parser.add_argument(
        "--truncated",
        choices=("error", "skip"),
        default="error",
        help="--segments: a batch cut off at the end of a partition's last segment "
        "(one being written) is an error, or skipped",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="--bootstrap-server: give up on a request after this long (default 30)",
    )
    parser.set_defaults(run=lambda args: run_dump(args, security=security, flags=flags))
    return parser


# ---------------------------------------------------------------- the rows


def _check(args):
    if args.segments and (args.bootstrap_server or args.topic):
        raise UsageError("--segments reads files: give it, or --bootstrap-server and --topic")
    if not args.segments and not args.bootstrap_server:
        raise UsageError("say what to read: --bootstrap-server and --topic, or --segments")
    if args.bootstrap_server and not args.topic:
        raise UsageError("--bootstrap-server needs --topic")
    if args.segments:
        for flag, value in (("--start", args.start), ("--end", args.end)):
            if isinstance(value, str):
                raise UsageError(
                    f"{flag} {value}: segments are read whole unless given an offset or a time"
                )
    fmt = args.format
    if fmt is None:
        ext = os.path.splitext(args.to)[1].lower()
        if ext not in FORMATS:
            raise UsageError(
                f"--to {args.to!r}: cannot tell the format from its extension: "
                "add --format parquet, jsonl or csv"
            )
        fmt = FORMATS[ext]
    if not 0 < args.timeout <= 86400:
        raise UsageError(f"--timeout {args.timeout:g}: give 0 to 86400 seconds")
    return fmt


def _flagged(message):
    """A reader's error with its parameter names as the flags the user typed."""
    for library, flag in DUMP_ADVICE.items():
        message = message.replace(library, flag)
    return _PARAMETER.sub(lambda m: DUMP_FLAGS[m.group(1)], message)


def _missing_extra(error):
    """What to install for a library a reader could not import."""
    text = str(error)
    if "pip install" in text:  # the reader's own words name the extra
        return text
    return f"dump needs {error.name or 'pyarrow'}: pip install 'fastkwire[arrow]'"


def _output(to, segments=()):
    """A temporary file beside `to` (binary, open) and its path: the dump is moved into
    place when whole. What is there and not a regular file (/dev/null, a named pipe) is
    written to, not replaced: (the file, None). A folder that is not there, or not
    writable, `to` being a folder, or a file of the `segments` being read, is a usage
    error."""
    if os.path.isdir(to):
        raise UsageError(f"--to {to}: is a folder (name a file in it)")
    if os.path.exists(to):
        if not os.path.isfile(to):
            return open(to, "wb"), None
        real = os.path.realpath(to)
        for given in segments or ():
            if "://" in str(given):
                continue
            inside = os.path.realpath(given)
            index = inside[: -len(".log")] + ".index" if inside.endswith(".log") else None
            if real in (inside, index) or real.startswith(inside.rstrip(os.sep) + os.sep):
                raise UsageError(
                    f"--to {to}: is a file of --segments {given}, which the dump would replace"
                )
    directory = os.path.dirname(os.path.abspath(to))
    if not os.path.isdir(directory):
        raise UsageError(f"--to {to}: there is no folder {directory}")
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=os.path.basename(to) + ".", suffix=".partial", dir=directory
        )
    except OSError as e:
        raise UsageError(
            f"--to {to}: cannot write in the folder {directory}: {os_error_text(e)}"
        ) from None
    return os.fdopen(fd, "wb"), tmp


def _batches(args, security, warn):
    """(RecordBatches, {(topic, partition): offsets planned, or None}) of the read."""
    partitions = sorted({p for group in args.partition or () for p in group}) or None
    if args.segments:
        from . import segments

        tasks = segments.plan_segments(
            args.segments,
            partitions=partitions,
            start_offset=args.start,
            end_offset=args.end,
            isolation_level=args.isolation_level,
            truncated=args.truncated,
        )
        planned = {(t.topic, t.partition): None for t in tasks}

        def read():
            for task in tasks:
                yield from segments.read_task(task)

        return read(), planned
    from . import kafka_arrow

    options = kafka_arrow.ClientOptions(
        args.bootstrap_server,
        client_id="fastkwire-dump",
        request_timeout_ms=int(args.timeout * 1000),
        **security(args, warn),
    )
    ranges = kafka_arrow.plan(
        args.topic,
        bootstrap_servers=args.bootstrap_server,
        start_offset="earliest" if args.start is None else args.start,
        end_offset="latest" if args.end is None else args.end,
        partitions=partitions,
        isolation_level=args.isolation_level,
        options=options,
    )
    planned = {(r.topic, r.partition): len(r) for r in ranges}
    return (
        kafka_arrow.read_ranges(ranges, options=options, isolation_level=args.isolation_level),
        planned,
    )


# ---------------------------------------------------------------- writers


def _encoder(bytes_as):
    if bytes_as == "base64":
        return lambda b, where: None if b is None else base64.b64encode(b).decode("ascii")
    if bytes_as == "hex":
        return lambda b, where: None if b is None else b.hex()

    def text(b, where):
        if b is None:
            return None
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(
                f"--bytes text: the {where()} is not UTF-8 (byte {e.start}): "
                "use --bytes base64 or --bytes hex"
            ) from None

    return text


def _text_rows(batch, encode):
    """A batch's rows with bytes as text, headers as [[key, value], ...]."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    for i in range(batch.num_rows):
        topic, partition, offset = cols["topic"][i], cols["partition"][i], cols["offset"][i]

        def where(what, topic=topic, partition=partition, offset=offset):
            return lambda: f"{what} of {topic}-{partition} offset {offset}"

        yield {
            "offset": offset,
            "key": encode(cols["key"][i], where("key")),
            "value": encode(cols["value"][i], where("value")),
            "topic": topic,
            "partition": partition,
            "timestamp": cols["timestamp"][i],
            "timestamp_type": cols["timestamp_type"][i],
            "headers": [[k, encode(v, where(f"header {k!r}"))] for k, v in cols["headers"][i]],
        }


class _Parquet:
    def __init__(self, out, schema):
        import pyarrow.parquet as pq

        self.writer = pq.ParquetWriter(out, schema)

    def write(self, batch):
        self.writer.write_batch(batch)

    def close(self):
        self.writer.close()


class _JsonLines:
    def __init__(self, out, encode):
        self.out, self.encode = out, encode

    def write(self, batch):
        lines = [json.dumps(row, ensure_ascii=False) for row in _text_rows(batch, self.encode)]
        if lines:
            self.out.write(("\n".join(lines) + "\n").encode("utf-8"))

    def close(self):
        pass


class _Csv:
    COLUMNS = (
        "offset",
        "key",
        "value",
        "topic",
        "partition",
        "timestamp",
        "timestamp_type",
        "headers",
    )

    def __init__(self, out, encode):
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self.pa, self.encode = pa, encode
        self.schema = pa.schema(
            [
                (
                    n,
                    pa.int64()
                    if n in ("offset", "timestamp")
                    else pa.int32()
                    if n in ("partition", "timestamp_type")
                    else pa.string(),
                )
                for n in self.COLUMNS
            ]
        )
        # Strings quoted, nulls left empty and unquoted: a null and b"" stay apart.
        self.writer = pacsv.CSVWriter(
            out, self.schema, write_options=pacsv.WriteOptions(quoting_style="needed")
        )

    def write(self, batch):
        rows = list(_text_rows(batch, self.encode))
        columns = {n: [r[n] for r in rows] for n in self.COLUMNS}
        columns["headers"] = [json.dumps(h, ensure_ascii=False) for h in columns["headers"]]
        self.writer.write_table(self.pa.table(columns, schema=self.schema))

    def close(self):
        self.writer.close()


# ---------------------------------------------------------------- progress


class Progress:
    """One line on a terminal: records, bytes, rate, and each partition's records (of
    those planned, when known). Quiet unless the stream is a terminal."""

    def __init__(self, stream, planned, clock=time.monotonic):
        self.stream, self.planned, self.clock = stream, planned, clock
        self.active = hasattr(stream, "isatty") and stream.isatty()
        self.start = self.last = clock()
        self.records = self.bytes = 0
        self.done = dict.fromkeys(planned, 0)

    def add(self, batch):
        n = batch.num_rows
        self.records += n
        self.bytes += batch.nbytes
        if n:
            key = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
            self.done[key] = self.done.get(key, 0) + n
        now = self.clock()
        if self.active and now - self.last >= PROGRESS_INTERVAL:
            self.last = now
            self._draw(now, "\r")

    def line(self, now):
        rate = self.bytes / max(now - self.start, 1e-9)
        parts = []
        for (topic, partition), n in sorted(self.done.items()):
            total = self.planned.get((topic, partition))
            parts.append(f"{topic}-{partition} {n:,}" + (f"/{total:,}" if total else ""))
        shown = " ".join(parts[:8]) + (f" (+{len(parts) - 8} more)" if len(parts) > 8 else "")
        return f"{self.records:,} records, {_size(self.bytes)}, {_size(rate)}/s" + (
            f" | {shown}" if shown else ""
        )

    def _draw(self, now, end):
        self.stream.write("\r\x1b[K" + self.line(now) + end)
        self.stream.flush()

    def finish(self):
        if self.active:
            self._draw(self.clock(), "\n")


def _size(n):
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


# ---------------------------------------------------------------- the command


def run_dump(args, *, security, flags, stdout=None, stderr=None):
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr

    def warn(message):
        print(f"{args.prog}: warning: {message}", file=stderr)

    try:
        fmt = _check(args)
    except UsageError as e:
        print(f"{args.prog}: error: {printable(str(e))}", file=stderr)
        return EXIT_USAGE
    from .connection_errors import KafkaClientError, OptionError
    from .errors import DecodeError

    args.option_names = dict(flags)  # where each option came from (security() adds to it)
    tmp = out = writer = None
    try:
        batches, planned = _batches(args, security, warn)
        from ._arrow_rows import SCHEMA

        if args.to == "-":
            out = stdout.buffer if hasattr(stdout, "buffer") else stdout
        else:
            out, tmp = _output(args.to, args.segments)
        encode = _encoder(args.bytes_as)
        writer = (
            _Parquet(out, SCHEMA)
            if fmt == "parquet"
            else _JsonLines(out, encode)
            if fmt == "jsonl"
            else _Csv(out, encode)
        )
        progress = Progress(stderr, planned)
        for batch in batches:
            writer.write(batch)
            progress.add(batch)
        writer.close()
        progress.finish()
        if tmp is not None:
            out.close()
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it
            os.replace(tmp, args.to)
            tmp = None
        elif args.to != "-":
            out.close()  # a device or named pipe, written to in place
        else:
            out.flush()
        return EXIT_OK
    except UsageError as e:
        print(f"{args.prog}: error: {printable(str(e))}", file=stderr)
        return EXIT_USAGE
    except OptionError as e:
        names = {**DUMP_FLAGS, **args.option_names}
        print(f"{args.prog}: error: {printable(e.render(names))}", file=stderr)
        return EXIT_USAGE
    except ImportError as e:
        print(f"{args.prog}: error: {printable(_missing_extra(e))}", file=stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # the reader of --to - went away: the command line ends quietly (141)
    except (KafkaClientError, DecodeError, OSError) as e:
        print(f"{args.prog}: error: {printable(_flagged(str(e)))}", file=stderr)
        return EXIT_FAILED
    except (ValueError, TypeError) as e:
        print(f"{args.prog}: error: {printable(_flagged(str(e)))}", file=stderr)
        return EXIT_USAGE
    finally:
        if tmp is None and out is not None and args.to != "-":
            try:  # a device or named pipe written to in place
                out.close()
            except OSError:
                pass
        if tmp is not None:  # failed: the partial output goes
            for closing in (writer, out):
                try:
                    if closing is not None:
                        closing.close()
                except (OSError, ValueError):  # the dump's own error is the one to show
                    pass
            os.unlink(tmp)
