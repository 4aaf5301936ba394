"""Reading a capture, whichever kind: our JSON lines, or a pcap/pcapng file (told apart by
their first bytes)."""

from ._capture import CaptureError, read_jsonl
from ._pcap import read_pcap

PCAP_MAGICS = (
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
)


def capture_kind(path):
    """ "pcap" or "jsonl", from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head in PCAP_MAGICS:
        return "pcap"
    if not head:
        raise CaptureError(f"{path}: the file is empty")
    if head[:1] == b"{" or head[:1].isspace():
        return "jsonl"
    raise CaptureError(
        f"{path}: neither a fastkwire capture (JSON lines) nor a pcap/pcapng file "
        f"(it starts {head.hex()})"
    )


def read_capture(path, port=None, warn=None):
    """The exchanges of a capture: our JSON lines, or a pcap/pcapng file whose TCP streams to
    or from `port` (None: the streams that speak Kafka) are reassembled and paired by
    correlation id. What cannot be read of a damaged capture goes to `warn(text)` (by
    default a CaptureWarning) after what can."""
    if capture_kind(path) == "pcap":
        return read_pcap(path, port, warn)  # raises ImportError naming the extra without dpkt
    return read_jsonl(path, warn)
