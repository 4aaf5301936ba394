"""Install an extra's requirements one by one, for an interpreter some of them have no
build for (free-threaded CPython: no environment marker tells it apart, so the extra cannot
leave those out itself).

    python tools/install_extra.py test      # with the interpreter that will run the suite

Each requirement is installed from wheels only (the newest release within its bounds that
has one for this interpreter), and failing that from its sdist, given three minutes; what
still does not install is listed, and the tests that need it skip, saying so. Exits 1
only when nothing of the extra installed.
"""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SDIST_BUILD_SECONDS = 180


def pip(*args, timeout=None):
    cmd = [sys.executable, "-m", "pip", "install", "-q", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[0] if argv else "test"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["optional-dependencies"][extra]
    missing = []
    for requirement in requirements:
        started = time.monotonic()
        if pip("--only-binary=:all:", requirement) or pip(
            "--prefer-binary", requirement, timeout=SDIST_BUILD_SECONDS
        ):
            print(f"installed {requirement} ({time.monotonic() - started:.0f} s)")
        else:
            missing.append(requirement)
            print(
                f"not installable here: {requirement} ({time.monotonic() - started:.0f} s; "
                "its tests skip)"
            )
    if missing:
        print(f"{len(missing)} of {len(requirements)} not installed: {', '.join(missing)}")
    return 1 if len(missing) == len(requirements) else 0


if __name__ == "__main__":
    sys.exit(main())
