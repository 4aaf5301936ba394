"""Keyed timers on a clock that tests drive: scheduling a key again replaces its timer, as
Kafka's coordinator timer does (one heartbeat deadline per member, one join deadline per group).
"""


class Timers:
    """`schedule(key, delay_ms, action)`, `cancel(key)`; `fire()` runs the due actions in
    deadline order (an action may schedule or cancel others) and gives the next deadline."""

    def __init__(self, clock):
        self.clock = clock
        self._due = {}  # key -> (deadline in clock seconds, sequence, action)
        self._sequence = 0

    def schedule(self, key, delay_ms, action):
        self._sequence += 1
        self._due[key] = (self.clock() + max(delay_ms, 0) / 1000.0, self._sequence, action)

    def cancel(self, key):
        self._due.pop(key, None)

    def __contains__(self, key):
        return key in self._due

    def deadline(self, key):
        entry = self._due.get(key)
        return None if entry is None else entry[0]

    def next_deadline(self):
        return min((d for d, _, _ in self._due.values()), default=None)

    def fire(self):
        """Run every action whose deadline has come, in deadline order; returns the next
        deadline or None. Timers an action schedules wait for the next call, so an action
        that schedules itself again at once cannot hold the caller."""
        last = self._sequence
        while True:
            now = self.clock()
            due = [(d, s, k) for k, (d, s, _) in self._due.items() if d <= now and s <= last]
            if not due:
                return self.next_deadline()
            key = min(due)[2]
            action = self._due.pop(key)[2]
            action()
