"""Differential fuzzing of the encoders: hostile Python values through both implementations.

    python3 fuzz/fuzz_encode.py --loop 100000 --seed 1

Each input is a seed; fuzz/hostile.py builds the same message from it with the pure and
the compiled classes (valid values, and at random hostile ones: lying lists, zero-stride
arrays, callbacks that change the message while it is encoded, colliding tags, bad
buffers and offsets...) and encodes it one way in both. They must agree: the same bytes
(which must read back), or the same exception class, and encode_into must leave the
buffer as the other implementation does (untouched on error). The loop keeps going
after a finding, prints each with its seed and a summary, and exits 1 if there was any.
Replay one seed with `--replay SEED`.

One input in RECORDS_EVERY goes to fuzz/hostile_records.py instead: RecordColumns whose
arrays lie about each other, or whose getters rewrite an array while write_batch takes
them, written by both record kernels (`--replay` takes such a seed too: it says which).

`--gc-stress` runs the loop with a collection at nearly every allocation and a walker
over the young objects at each (fuzz/hostile.py's gc_stress): a container the compiled
core lets the collector see half built crashes it. It is some ten times slower; the
default loop does not do it.
"""

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostile  # noqa: E402
import hostile_records  # noqa: E402

RECORDS_EVERY = 8


def check(case):
    """One seed: a message (fuzz/hostile.py) or, one in RECORDS_EVERY, record columns."""
    if case % RECORDS_EVERY == 0:
        return hostile_records.check(case)
    return hostile.check(case)


def run_loop(count, seed, stop_after=20):
    """`count` seeds drawn from `seed`; returns the number of findings."""
    rng = random.Random(seed)
    findings = 0
    started = time.monotonic()
    i = 0
    for i in range(1, count + 1):
        case = rng.getrandbits(48)
        try:
            check(case)
        except Exception:  # noqa: BLE001 - a finding, whatever its type
            findings += 1
            print(f"finding {findings} at input {i}: seed {case}", file=sys.stderr)
            traceback.print_exc()
            if findings >= stop_after:
                break
        if i % 10_000 == 0:
            rate = i / (time.monotonic() - started)
            print(f"#{i} inputs, {findings} findings, {rate:.0f}/s", file=sys.stderr)
    elapsed = time.monotonic() - started
    print(f"done: {i} inputs in {elapsed:.0f} s, {findings} findings", file=sys.stderr)
    return findings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", type=int, default=100_000, help="inputs to run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replay", type=int, help="check one input (a seed a finding printed)")
    parser.add_argument(
        "--gc-stress",
        action="store_true",
        help="collect at every allocation and walk the young objects each time",
    )
    args = parser.parse_args()
    if hostile.CY is None:
        sys.exit("the compiled extension is not built: nothing to compare the pure codec with")
    if args.gc_stress:
        hostile.gc_stress()
    if args.replay is not None:
        print(check(args.replay))
        return
    sys.exit(1 if run_loop(args.loop, args.seed) else 0)


if __name__ == "__main__":
    main()
