"""Committed offsets, per group and partition: the store behind OffsetCommit, OffsetFetch,
OffsetDelete and DeleteGroups. It keeps what it is told; the checks (generation, member,
topic) are the group coordinator's.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int  # -1: not given
    metadata: str | None
    commit_time: float  # on the coordinator's clock, in seconds


class OffsetStore:
    def __init__(self):
        self._groups = {}  # group id -> {(topic, partition): Committed}
        # on_change(group id, topic, partition, Committed or None for deleted): each change,
        # to be kept (Kafka's OffsetCommit records and their tombstones)
        self.on_change = None

    def commit(self, group_id, topic, partition, committed):
        self._groups.setdefault(group_id, {})[(topic, partition)] = committed
        if self.on_change is not None:
            self.on_change(group_id, topic, partition, committed)

    def get(self, group_id, topic, partition):
        return self._groups.get(group_id, {}).get((topic, partition))

    def by_topic(self, group_id):
        """{topic: {partition: Committed}} in topic, then partition order."""
        topics = {}
        for (topic, partition), committed in sorted(self._groups.get(group_id, {}).items()):
            topics.setdefault(topic, {})[partition] = committed
        return topics

    def topics(self, group_id):
        return {topic for topic, _ in self._groups.get(group_id, {})}

    def delete(self, group_id, topic, partition):
        offsets = self._groups.get(group_id)
        if offsets is not None and offsets.pop((topic, partition), None) is not None:
            if not offsets:
                del self._groups[group_id]
            if self.on_change is not None:
                self.on_change(group_id, topic, partition, None)

    def delete_group(self, group_id):
        offsets = self._groups.pop(group_id, None)
        if offsets and self.on_change is not None:
            for topic, partition in offsets:
                self.on_change(group_id, topic, partition, None)

    def groups(self):
        """The ids of the groups with committed offsets."""
        return list(self._groups)

    def has_offsets(self, group_id):
        return bool(self._groups.get(group_id))

    def expire(self, group_id, keep):
        """Drop the group's offsets for which `keep(topic, committed)` is false; how many."""
        offsets = self._groups.get(group_id, {})
        gone = [key for key, c in offsets.items() if not keep(key[0], c)]
        for key in gone:
            self.delete(group_id, *key)
        return len(gone)
