"""Memory (tracemalloc peak) and time per input byte of `explain` and `render` on
adversarial frames: long arrays of the smallest elements, deep nesting, many tags.

    python benchmarks/explain_cost.py [--size BYTES] [--max-items N|all]

Not a pytest-benchmark file: a table for docs/robustness.md.
"""

import argparse
import time
import tracemalloc

import fastkwire as fk
from fastkwire.explain import explain, render

SHB = fk.StreamsGroupHeartbeatRequest


def leave_group(size):
    member = fk.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="", reason="")
    msg = fk.LeaveGroupRequest(group_id="g", members=[member] * (size // 4))
    return fk.encode_request(msg, 5, 1), None, None


def empty_tasks(size):
    task = SHB.TaskIds(subtopology_id="", partitions=[])
    return (
        fk.encode_request(
            SHB(group_id="g", member_id="m", active_tasks=[task] * (size // 3)), 0, 1
        ),
        None,
        None,
    )


def empty_strings(size):
    sub = SHB.Subtopology(subtopology_id="", source_topics=[""] * size)
    return (
        fk.encode_request(
            SHB(group_id="g", member_id="m", topology=SHB.Topology(epoch=0, subtopologies=[sub])),
            0,
            1,
        ),
        None,
        None,
    )


def int32s(size):
    task = SHB.TaskIds(subtopology_id="", partitions=[0] * (size // 4))
    return (
        fk.encode_request(SHB(group_id="g", member_id="m", active_tasks=[task]), 0, 1),
        None,
        None,
    )


def nested(size):
    k = max(2, round((size / 3) ** (1 / 3)))
    kv = SHB.KeyValue(key="", value="")
    topic = SHB.TopicInfo(name="", partitions=0, replication_factor=0, topic_configs=[kv] * k)
    sub = SHB.Subtopology(subtopology_id="", state_changelog_topics=[topic] * k)
    return (
        fk.encode_request(
            SHB(
                group_id="g", member_id="m", topology=SHB.Topology(epoch=0, subtopologies=[sub] * k)
            ),
            0,
            1,
        ),
        None,
        None,
    )


def many_tags(size):
    msg = fk.ApiVersionsResponse(unknown_tagged_fields={t: b"" for t in range(10, 10 + size // 4)})
    return fk.encode_response(msg, 3, 1), 18, 3


FRAMES = [leave_group, empty_tasks, empty_strings, int32s, nested, many_tags]


def measure(fn):
    """(result, tracemalloc peak, seconds): timed apart, since tracing slows it down."""
    t = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t
    tracemalloc.start()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, peak, elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--max-items", help="passed to explain (default: its own)")
    args = parser.parse_args()
    size = args.size
    kw = (
        {}
        if args.max_items is None
        else {"max_items": None if args.max_items == "all" else int(args.max_items)}
    )
    print("| frame | bytes | explain: bytes/B | explain: us/B | render: bytes/B | render: us/B |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for make in FRAMES:
        frame, key, version = make(size)
        root, peak, secs = measure(lambda: explain(frame, key, version, **kw))
        _, rpeak, rsecs = measure(lambda: render(frame, root))
        n = len(frame)
        print(
            f"| {make.__name__} | {n:,} | {peak / n:.1f} | {secs * 1e6 / n:.2f} "
            f"| {rpeak / n:.1f} | {rsecs * 1e6 / n:.2f} |",
            flush=True,
        )
        root = None  # free the tree before the next frame


if __name__ == "__main__":
    main()
