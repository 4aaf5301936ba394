"""A sink on its own thread behind a bounded queue, so that a slow output (a terminal paused
with Ctrl-S, `| less`, a stalled log shipper, a slow disk) never holds forwarding back.

The event loop only offers items; the thread formats and writes them. When the queue is
full (in items or in the bytes of the frames they hold), an item is dropped and counted,
never waited for: `dropped` says how many, for the report at the end.
"""

import queue
import threading
import time

DEFAULT_MAX_ITEMS = 10_000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
BATCH_DELAY = 0.02  # seconds items gather before the thread writes them, then flushes


class QueuedSink:
    """Calls `write(item)` for every item offered, in order, on a thread of its own, and
    `flush()` after each batch (what gathered within BATCH_DELAY of the first item)."""

    def __init__(
        self,
        write,
        flush=None,
        *,
        max_items=DEFAULT_MAX_ITEMS,
        max_bytes=DEFAULT_MAX_BYTES,
        name="sink",
    ):
        self._write, self._flush = write, flush
        self.max_items, self.max_bytes = max_items, max_bytes
        self._queue = queue.SimpleQueue()
        # Counted without a lock: items and bytes offered (by the thread that offers) and
        # written (by the sink's thread), each list changed by one thread only.
        self._offered = [0, 0]
        self._written = [0, 0]
        self.dropped = 0
        self.errors = []  # the first few exceptions write or flush raised
        self._thread = threading.Thread(target=self._run, name=f"fastkwire-{name}", daemon=True)
        self._thread.start()

    def offer(self, item, size=0):
        """Queues `item` (holding `size` bytes); False, and counted, when the queue is full.
        Called from one thread (the event loop's)."""
        offered, written = self._offered, self._written
        items = offered[0] - written[0]
        if items >= self.max_items or (items and offered[1] - written[1] + size > self.max_bytes):
            self.dropped += 1
            return False
        offered[0] += 1
        offered[1] += size
        self._queue.put((item, size))
        return True

    def _run(self):
        while True:
            batch = [self._queue.get()]
            # Items offered meanwhile gather without waking this thread: one wake-up, and
            # one flush, per batch rather than per exchange (each wake-up costs the event
            # loop's thread the GIL).
            time.sleep(BATCH_DELAY)
            batch += drain_queue(self._queue)
            written = self._written
            for got in batch:
                if got is None:
                    self._call(self._flush)
                    return
                item, size = got
                self._call(self._write, item)
                written[0] += 1
                written[1] += size
            self._call(self._flush)

    def _call(self, fn, *args):
        if fn is None:
            return
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - one bad write must not end the sink
            if len(self.errors) < 10:
                self.errors.append(e)

    @property
    def pending(self):
        return self._offered[0] - self._written[0]

    def close(self, timeout=None):
        """Writes what is queued (waiting at most `timeout` seconds), then stops; True when
        everything was written."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


def drain_queue(q):
    """Every item in the queue now, without waiting."""
    out = []
    try:
        while True:
            out.append(q.get_nowait())
    except queue.Empty:
        return out
