"""Install an extra's requirements for an interpreter some of them have no build for
(free-threaded CPython: no environment marker tells it apart, so the extra cannot leave
those out itself).

    python tools/install_extra.py test      # with the interpreter that will run the suite

Wheels only: each requirement is first resolved on its own (`pip install --dry-run
--only-binary=:all:`, four at a time), then every one that resolved is installed by one
pip call. A requirement with no wheel for this interpreter is not built from source (the
peers without one are Rust and C projects whose builds take longer than a CI run has):
it is listed, and the tests that need it skip, saying so. Exits 1 only when nothing of
the extra installed.
"""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESOLVE_SECONDS = 300
INSTALL_SECONDS = 1200


def pip(*args, timeout):
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--only-binary=:all:", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"
    return done.returncode == 0, done.stderr.strip().splitlines()[-1:] or [""]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[0] if argv else "test"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"][extra]
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        resolved = list(
            pool.map(lambda r: pip("--dry-run", r, timeout=RESOLVE_SECONDS)[0], requirements)
        )
    wheels = [r for r, ok in zip(requirements, resolved) if ok]
    missing = [r for r, ok in zip(requirements, resolved) if not ok]
    print(f"resolved {len(wheels)} of {len(requirements)} ({time.monotonic() - started:.0f} s)")
    ok, why = pip(*wheels, timeout=INSTALL_SECONDS) if wheels else (False, "none")
    if not ok and wheels:
        # Together they conflict, or one failed: one by one, so the rest still install.
        print(f"one install of all failed ({why}); one by one")
        for r in list(wheels):
            if not pip(r, timeout=RESOLVE_SECONDS)[0]:
                wheels.remove(r)
                missing.append(r)
    print(f"installed {len(wheels)} in {time.monotonic() - started:.0f} s")
    for r in missing:
        print(f"no wheel for this interpreter: {r} (its tests skip)")
    return 1 if not wheels else 0


if __name__ == "__main__":
    sys.exit(main())
