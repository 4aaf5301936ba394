"""Keyed timers on a clock that tests drive: scheduling a key again replaces its timer, as
Kafka's coordinator timer does (one heartbeat deadline per member, one join deadline per group).

The deadlines are kept in a heap, so that scheduling, and looking for what is due, cost
O(log n) with n timers: a client that makes many members (each with its timer) must not
make every other request slower.
"""

import heapq

# The heap keeps replaced timers until they come up; past this many times the live ones,
# it is rebuilt from them (members that heartbeat reschedule their timer at each heartbeat).
_STALE_FACTOR = 2


class Timers:
    """`schedule(key, delay_ms, action)`, `cancel(key)`; `fire()` runs the due actions in
    deadline order (an action may schedule or cancel others) and gives the next deadline."""

    def __init__(self, clock):
        self.clock = clock
        self._due = {}  # key -> (deadline in clock seconds, sequence, action)
        self._heap = []  # (deadline, sequence, key); stale when _due[key] has another sequence
        self._sequence = 0

    def schedule(self, key, delay_ms, action):
        self._sequence += 1
        deadline = self.clock() + max(delay_ms, 0) / 1000.0
        self._due[key] = (deadline, self._sequence, action)
        heapq.heappush(self._heap, (deadline, self._sequence, key))
        self._compact()

    def cancel(self, key):
        if self._due.pop(key, None) is not None:
            self._compact()

    def _compact(self):
        """Rebuild the heap from the live timers once it holds too many replaced ones."""
        if len(self._heap) > _STALE_FACTOR * len(self._due) + 64:
            self._heap = [(d, s, k) for k, (d, s, _) in self._due.items()]
            heapq.heapify(self._heap)

    def __contains__(self, key):
        return key in self._due

    def __len__(self):
        return len(self._due)

    def deadline(self, key):
        entry = self._due.get(key)
        return None if entry is None else entry[0]

    def _top(self):
        """The earliest live (deadline, sequence, key), stale entries dropped; None if none."""
        heap = self._heap
        while heap:
            deadline, sequence, key = heap[0]
            entry = self._due.get(key)
            if entry is not None and entry[1] == sequence:
                return heap[0]
            heapq.heappop(heap)
        return None

    def next_deadline(self):
        top = self._top()
        return None if top is None else top[0]

    def fire(self):
        """Run every action whose deadline has come, in deadline order; returns the next
        deadline or None. Timers an action schedules wait for the next call, so an action
        that schedules itself again at once cannot hold the caller."""
        last = self._sequence
        while True:
            top = self._top()
            # A timer scheduled during this call sorts after every older one that is due
            # (its deadline is now or later, and its sequence is higher): stop there.
            if top is None or top[0] > self.clock() or top[1] > last:
                return None if top is None else top[0]
            heapq.heappop(self._heap)
            action = self._due.pop(top[2])[2]
            action()
