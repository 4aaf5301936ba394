"""The server-side assignors of KIP-848 consumer groups, by the names Kafka gives them:
"uniform" (Kafka's default: balanced and sticky) and "range".

An assignor takes the members' subscriptions ({member id: set of topic ids}), the topics
({topic id: (name, partition count)}) and the current target assignment ({member id:
{topic id: set of partitions}}), and gives the next target in the same shape.
"""

import heapq


def _partitions(subscriptions, topics):
    """Every partition some member subscribes to, in topic name then partition order."""
    wanted = set().union(*subscriptions.values()) if subscriptions else set()
    return [
        (tid, p)
        for tid in sorted(wanted & topics.keys(), key=lambda t: topics[t][0])
        for p in range(topics[tid][1])
    ]


def uniform(subscriptions, topics, current):
    """Balanced and sticky: a member keeps what it has while it stays within its share, the
    rest goes to the least loaded members subscribed to the partition's topic. The least
    loaded is found in a heap per topic (members by load, then id), not by looking at every
    member for every partition: the work grows with the subscriptions and the partitions,
    not with their product."""
    members = sorted(subscriptions)
    owner = {}
    for m in members:
        for tid, parts in current.get(m, {}).items():
            if tid in subscriptions[m] and tid in topics:
                for p in parts:
                    if p < topics[tid][1] and (tid, p) not in owner:
                        owner[(tid, p)] = m
    load = {m: 0 for m in members}
    for m in owner.values():
        load[m] += 1
    partitions = _partitions(subscriptions, topics)
    by_topic = {}  # topic id -> its partitions, in order
    for tid, p in partitions:
        by_topic.setdefault(tid, []).append((tid, p))
    eligible = {tid: [m for m in members if tid in subscriptions[m]] for tid in by_topic}

    def lightest(heap):
        """The least loaded of a topic's members (entries whose load moved are dropped;
        each change of load pushed a current one)."""
        while heap[0][0] != load[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][1]

    def heap_of(tid):
        heap = [(load[m], m) for m in eligible[tid]]
        heapq.heapify(heap)
        return heap

    # Shed what a member holds beyond what an even share of its topics allows.
    for tid, tps in by_topic.items():
        heap = heap_of(tid)
        for tp in tps:
            m = owner.get(tp)
            if m is None:
                continue
            light = lightest(heap)
            if load[m] - load[light] > 1:
                owner[tp] = light
                load[m] -= 1
                load[light] += 1
                heapq.heappush(heap, (load[m], m))
                heapq.heappush(heap, (load[light], light))
    for tid, tps in by_topic.items():
        heap = heap_of(tid)
        for tp in tps:
            if tp not in owner:
                m = lightest(heap)
                owner[tp] = m
                load[m] += 1
                heapq.heappush(heap, (load[m], m))
    return _by_member(members, owner)


def range_(subscriptions, topics, current):
    """Per topic, its partitions in contiguous ranges over the subscribed members in member
    id order, the first ones taking one more when they do not divide evenly."""
    members = sorted(subscriptions)
    owner = {}
    for tid, (_, count) in topics.items():
        takers = [m for m in members if tid in subscriptions[m]]
        if not takers:
            continue
        share, extra = divmod(count, len(takers))
        start = 0
        for n, m in enumerate(takers):
            size = share + (1 if n < extra else 0)
            for p in range(start, start + size):
                owner[(tid, p)] = m
            start += size
    return _by_member(members, owner)


def _by_member(members, owner):
    target = {m: {} for m in members}
    for (tid, p), m in owner.items():
        target[m].setdefault(tid, set()).add(p)
    return target


ASSIGNORS = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
