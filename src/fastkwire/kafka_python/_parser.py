"""kafka-python's KafkaProtocol.receive_bytes without copying each response frame.

Stock, a response is copied three times before it is decoded: sliced out of the received
chunk, written into a KafkaBytes buffer, and read out of it again (`read()` makes bytes)
for the decoder. Here a frame that arrived whole is decoded from a memoryview of the
chunk itself, and a frame that arrived in pieces from a memoryview of the one buffer it
was gathered in. The response header is read as stock reads it (its own small bytes), and
the parser's state, logging and exceptions are kafka-python's.
"""

import struct

_names = {}  # kafka-python's objects this module uses (bind())


def bind(log, errors, kafka_bytes, int32, find_coordinator_response, api_message, stock_process):
    _names.update(
        log=log,
        errors=errors,
        KafkaBytes=kafka_bytes,
        Int32=int32,
        FindCoordinatorResponse=find_coordinator_response,
        decode=api_message.__dict__["decode"].__func__,
        parse_header=api_message.__dict__["parse_header"].__func__,
        stock_process=stock_process,
    )


def _reads_views(response_type):
    """True when the response class reads its header and body with ApiMessage's own
    methods (which take a memoryview); other classes (kafka.protocol.old's, or one that
    overrides decode) get the file-like buffer stock gives them."""
    decode = getattr(response_type, "decode", None)
    parse_header = getattr(response_type, "parse_header", None)
    return (
        getattr(decode, "__func__", None) is _names["decode"]
        and getattr(parse_header, "__func__", None) is _names["parse_header"]
    )


class _HeaderReader:
    """The file-like view of a frame that kafka-python's header decoder reads: bytes out
    of a memoryview, so its values (unknown tags) are bytes as stock."""

    __slots__ = ("view", "pos")

    def __init__(self, view):
        self.view = view
        self.pos = 0

    def read(self, nbytes=None):
        start = self.pos
        self.pos = len(self.view) if nbytes is None else min(start + nbytes, len(self.view))
        return bytes(self.view[start : self.pos])


def _process(self, frame):
    """KafkaProtocol._process_response over a memoryview of one frame."""
    errors = _names["errors"]
    log = _names["log"]
    replaced = type(self).__dict__.get("_process_response", _names["stock_process"]) is not _names[
        "stock_process"
    ] or "_process_response" in getattr(self, "__dict__", ())
    if replaced or self.in_flight_requests:
        response_type = None if replaced else self.in_flight_requests[0].get_response_class()
        if replaced or (response_type is not None and not _reads_views(response_type)):
            # a subclass's or a mock's _process_response, or a class that reads a file:
            # stock's own buffer and path
            buffer = _names["KafkaBytes"](len(frame))
            buffer.write(frame)
            buffer.seek(0)
            return self._process_response(buffer)
    if not self.in_flight_requests:
        raise errors.CorrelationIdError("No in-flight-request found for server response")
    header = self.in_flight_requests.popleft()
    correlation_id = header.correlation_id
    response_type = header.get_response_class()
    if response_type is None:
        log.error(
            "Unable to find ResponseType for api=%d version=%d", header.api_key, header.api_version
        )
        raise errors.KafkaProtocolError(
            "Unable to find response type for api %d v%d" % (header.api_key, header.api_version)
        )
    reader = _HeaderReader(frame)
    response_header = response_type.parse_header(reader)
    recv_correlation_id = response_header.correlation_id
    if (
        recv_correlation_id == 0
        and correlation_id != 0
        and response_type is _names["FindCoordinatorResponse"]
        and header.api_version == 0
    ):
        log.warning(
            "Kafka 0.8.2 quirk -- FindCoordinatorResponse"
            " Correlation ID does not match request. This"
            " should go away once at least one topic has been"
            " initialized on the broker."
        )
    elif correlation_id != recv_correlation_id:
        raise errors.CorrelationIdError(
            "Correlation IDs do not match: sent %d, recv %d" % (correlation_id, recv_correlation_id)
        )
    try:
        response = response_type.decode(frame[reader.pos :])
    except (ValueError, struct.error):
        buf = bytes(frame)
        log.error(
            "Response %d [ResponseType: %s RequestHeader: %s]: Unable to decode %d-byte buffer: %r",
            correlation_id,
            response_type,
            header,
            len(buf),
            buf,
        )
        raise errors.KafkaProtocolError("Unable to decode response")
    log.debug("%s Received response %d %s", self._ident, correlation_id, response)
    return (correlation_id, response)


def _process_whole(self, view, nbytes):
    """A frame found whole in the received chunk. On an error the parser is left as stock
    leaves it: the frame in its receive buffer, read to the end."""
    try:
        return _process(self, view)
    except BaseException:
        buffer = _names["KafkaBytes"](nbytes)
        buffer.write(view)
        self._rbuffer = buffer
        raise


def receive_bytes(self, data):
    """KafkaProtocol.receive_bytes: the same responses, state and errors, fewer copies."""
    errors = _names["errors"]
    i = 0
    n = len(data)
    responses = []
    if data:
        _names["log"].debug("%s Recv: %r", self._ident, data)
    view = memoryview(data)
    try:
        while i < n:
            if not self._receiving:
                bytes_to_read = min(4 - self._header.tell(), n - i)
                self._header.write(view[i : i + bytes_to_read])
                i += bytes_to_read
                if self._header.tell() == 4:
                    self._header.seek(0)
                    nbytes = _names["Int32"].decode(self._header)
                    self._validate_frame_size(nbytes)
                    if n - i >= nbytes:  # the whole frame is here: read it where it is
                        frame = view[i : i + nbytes]
                        i += nbytes
                        self._receiving = False
                        responses.append(_process_whole(self, frame, nbytes))
                        self._reset_buffer()
                        continue
                    self._rbuffer = _names["KafkaBytes"](nbytes)
                    self._receiving = True
                elif self._header.tell() > 4:
                    raise errors.KafkaError("this should not happen - are you threading?")

            if self._receiving:
                total_bytes = len(self._rbuffer)
                staged_bytes = self._rbuffer.tell()
                bytes_to_read = min(total_bytes - staged_bytes, n - i)
                self._rbuffer.write(view[i : i + bytes_to_read])
                i += bytes_to_read
                staged_bytes = self._rbuffer.tell()
                if staged_bytes > total_bytes:
                    raise errors.KafkaError("Receive buffer has more bytes than expected?")
                if staged_bytes != total_bytes:
                    break
                self._receiving = False
                with memoryview(self._rbuffer) as frame:
                    responses.append(_process(self, frame))
                self._reset_buffer()
    finally:
        view.release()
    return responses
