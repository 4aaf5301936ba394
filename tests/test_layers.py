"""The package's import structure: the compiled modules, which import-linter does not
parse, import the shared rules and the wire table and never the pure twin, and no
module imports another that imports it back (function-level imports included, and the
type stubs' imports: a type checker follows those)."""

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "fastkwire"
CYTHON = sorted([*PKG.glob("*.pyx"), *PKG.glob("*.pxd"), *PKG.glob("*.pxi")])


def cython_imports(path):
    """The fastkwire modules a .pyx/.pxd/.pxi imports or cimports."""
    found = set()
    for m in re.finditer(
        r"^\s*(?:from fastkwire(?:\.(\w+))? c?import ([\w, ]+)|import fastkwire\.(\w+))",
        path.read_text(),
        re.M,
    ):
        if m.group(1) or m.group(3):
            found.add(m.group(1) or m.group(3))
        else:
            found.update(name.strip() for name in m.group(2).split(","))
    return found


def python_imports(path, modules):
    """The fastkwire modules a .py file imports, anywhere in it."""
    package = path.parent.relative_to(PKG.parent).as_posix().replace("/", ".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            target = (
                f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            )
            names = [f"{target}.{a.name}" for a in node.names]
            found.update(n for n in names if n in modules)
            if target in modules and not any(n in modules for n in names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
    return found


def test_compiled_modules_never_import_the_pure_twin():
    assert CYTHON
    for path in CYTHON:
        imports = cython_imports(path)
        assert not imports & {"_pure", "_pure_engine"}, (path.name, imports)


def test_no_import_cycles():
    files = {}
    for path in PKG.rglob("*.py"):
        name = path.relative_to(PKG.parent).with_suffix("").as_posix().replace("/", ".")
        files[name.removesuffix(".__init__")] = path
    stubs = {}
    for path in PKG.rglob("*.pyi"):
        name = path.relative_to(PKG.parent).with_suffix("").as_posix().replace("/", ".")
        stubs[name.removesuffix(".__init__")] = path
    modules = set(files) | set(stubs)
    graph = {name: python_imports(path, modules) - {name} for name, path in files.items()}
    for name, path in stubs.items():
        graph.setdefault(name, set()).update(python_imports(path, modules) - {name})
    for path in CYTHON:
        name = "fastkwire." + ("_records" if path.suffix == ".pxi" else path.stem)
        graph.setdefault(name, set()).update(f"fastkwire.{m}" for m in cython_imports(path))
    # The package itself imports the implementation it picks and what it re-exports; a
    # module that imports the package (for `implementation`) is checked by import-linter.
    graph.pop("fastkwire", None)
    for deps in graph.values():
        deps.discard("fastkwire")

    def reaches(start, goal, seen):
        for d in graph.get(start, ()):
            if d == goal or (d not in seen and (seen.add(d) or reaches(d, goal, seen))):
                return True
        return False

    cycles = [name for name in graph if reaches(name, name, set())]
    assert not cycles, cycles


# What `import fastkwire` may not pull in: each was a measurable share of the import
# (uuid brings platform and re; inspect brings ast, dis and tokenize). They are imported
# where a call needs them: the first UUID decoded or encoded, an error's suggestion.
HEAVY = ("uuid", "platform", "re", "inspect", "ast", "dis", "typing", "threading", "difflib")


def test_importing_fastkwire_leaves_the_heavy_modules_for_first_use():
    import subprocess
    import sys

    probe = (
        "import sys; import fastkwire; print(fastkwire.implementation); "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    for pure in ("", "1"):
        env = {**__import__("os").environ, "FASTKWIRE_PURE": pure, "PYTHONWARNINGS": "ignore"}
        out = subprocess.run(
            [sys.executable, "-S", "-c", f"import site; site.main(); {probe}"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        implementation, pulled = out.stdout.splitlines()
        if implementation == "cython" or pure:
            assert pulled == "[]", (implementation, pulled)
