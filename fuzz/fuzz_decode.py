"""Differential fuzzing of the decoders: hostile bytes through both implementations.

The one command (a bounded campaign of 1,000,000 inputs, needs `pip install atheris`):

    python3 fuzz/fuzz_decode.py -runs=1000000

Every input goes to the pure and the compiled implementation (and, for frames, to
`explain`); they must agree on it: the same decoded value, or a DecodeError at the same
offset with the same reason (fuzz/differential.py). Anything else, a crash, a foreign
exception or a disagreement, stops the run with the input written to crash-<sha1>.
An input slower than 2 s (-timeout) or a process past 1 GiB (-rss_limit_mb) is a finding
too. Other libFuzzer flags work as usual (-max_total_time=600, a corpus directory, ...).

An input is a two-byte selector, which picks how the rest is read (a request frame, a
response frame of some API and version, a bare message body or a `records` field), then the bytes. The
seeds are valid encodings of every message and version; the mutator mixes libFuzzer's
own mutations with ours: flipped bits, truncations, extensions, splices and length
fields set to extremes.

Without atheris (or under AddressSanitizer, see tools/asan.sh) a plain loop runs the
same mutations, keeps going after a finding and prints a summary:

    python3 fuzz/fuzz_decode.py --loop 100000 --seed 1
"""

import argparse
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import atheris
except ImportError:
    atheris = None

if atheris is not None and "--loop" not in sys.argv:
    # Coverage feedback comes from the pure implementation, the twin of the compiled one.
    with atheris.instrument_imports(include=["fastkwire._pure", "fastkwire._messages_python"]):
        import differential as D
else:
    import differential as D


SELECTOR = 2  # bytes of the selector: there are more targets than one byte counts


def _selector(index):
    return index.to_bytes(SELECTOR, "big")


def _seed_table():
    """[(selector, payload, sites)] of every seed."""
    table = []
    for target, data in D.seeds():
        found = D.sites(data, target) if target[0] in ("request", "response") else None
        table.append((D.target_index(target), data, found))
    return table


SEEDS = _seed_table()
POOL = [data for _, data, _ in SEEDS]


def split(data):
    """(target, payload) of one fuzz input."""
    if not data:
        return D.TARGETS[0], b""
    if len(data) < SELECTOR:
        return D.TARGETS[0], b""
    return D.TARGETS[int.from_bytes(data[:SELECTOR], "big") % len(D.TARGETS)], data[SELECTOR:]


def test_one_input(data):
    target, payload = split(data)
    D.check(target, payload)


def mutate_input(data, rng, fallback=None):
    """A new fuzz input from `data` (selector + payload)."""
    r = rng.random()
    if r < 0.2 or not data:  # back to a valid seed, length fields known
        selector, payload, found = rng.choice(SEEDS)
        return _selector(selector) + D.mutate(payload, rng, POOL, found)
    if r < 0.25:  # pure noise for a random target
        return _selector(rng.randrange(len(D.TARGETS))) + rng.randbytes(rng.randint(0, 64))
    if fallback is not None and r < 0.6:
        return fallback(data)
    return data[:SELECTOR] + D.mutate(data[SELECTOR:], rng, POOL)


def run_atheris(argv):
    def custom_mutator(data, max_size, seed):
        rng = random.Random(seed)
        out = mutate_input(data, rng, lambda d: atheris.Mutate(d, max_size))
        return out[:max_size]

    # A slow input is a finding too, and so is a run that grows past 1 GiB.
    for flag in ("-timeout=2", "-rss_limit_mb=1024"):
        if not any(a.startswith(flag.split("=")[0] + "=") for a in argv):
            argv = argv + [flag]
    if not any(not a.startswith("-") for a in argv[1:]):
        corpus = tempfile.mkdtemp(prefix="fastkwire-corpus-")
        for i, (selector, payload, _) in enumerate(SEEDS):
            Path(corpus, f"seed-{i:05d}").write_bytes(_selector(selector) + payload)
        argv = argv + [corpus]
        print(f"seed corpus: {len(SEEDS)} inputs in {corpus}", file=sys.stderr)
    atheris.Setup(argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


def run_loop(count, seed, stop_after=20):
    """The same campaign as a plain loop; returns the number of findings."""
    rng = random.Random(seed)
    findings = 0
    current = _selector(SEEDS[0][0]) + SEEDS[0][1]
    started = time.monotonic()
    for i in range(1, count + 1):
        current = mutate_input(current, rng)
        try:
            test_one_input(current)
        except Exception:  # noqa: BLE001 - a finding, whatever its type
            findings += 1
            print(f"finding {findings} at input {i}: {current.hex()}", file=sys.stderr)
            traceback.print_exc()
            if findings >= stop_after:
                break
        if rng.random() < 0.1:  # do not drift too far from valid frames
            current = _selector(SEEDS[0][0]) + SEEDS[0][1]
        if i % 100_000 == 0:
            rate = i / (time.monotonic() - started)
            print(f"#{i} inputs, {findings} findings, {rate:.0f}/s", file=sys.stderr)
    elapsed = time.monotonic() - started
    print(f"done: {i} inputs in {elapsed:.0f} s, {findings} findings", file=sys.stderr)
    return findings


def main():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--loop", type=int)
    parser.add_argument("--seed", type=int, default=1)
    args, rest = parser.parse_known_args()
    if D.CY is None:
        sys.exit("the compiled extension is not built: nothing to compare the pure codec with")
    if args.loop is not None or atheris is None:
        if atheris is None and args.loop is None:
            print(
                "atheris is not installed: running a plain loop of 100000 inputs", file=sys.stderr
            )
        sys.exit(1 if run_loop(args.loop or 100_000, args.seed) else 0)
    run_atheris([sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
