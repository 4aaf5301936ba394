"""Build the compiled core; fall back to a pure-Python install when that is impossible.

From a git checkout, Cython turns the .pyx into C (Cython is then a build requirement).
The sdist ships that C, so installing from it needs a C compiler but not Cython.

FASTKWIRE_PURE=1 skips the extension on purpose; FASTKWIRE_REQUIRE_EXTENSION=1 makes a
failed compile an error instead of a fallback (wheel builds must never ship pure code).
"""
import os
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

MODULES = [
    "fastkwire._core",
    "fastkwire._engine",
    "fastkwire._records",
    "fastkwire._kafka_python",
    "fastkwire._aiokafka",
    "fastkwire._forward",
    "fastkwire._framebuf",
]
# C headers whose changes rebuild the extension that includes them.
DEPENDS = {"fastkwire._forward": ["src/fastkwire/_forward.h"]}
# Every sdist has PKG-INFO at its top; the repository never does.
FROM_SDIST = os.path.exists("PKG-INFO")
REQUIRE = bool(os.environ.get("FASTKWIRE_REQUIRE_EXTENSION"))
FALLBACK = "installing the pure-Python implementation only"
# GCC stops inlining in a file once inlining has grown its code by 40% (its default
# inline-unit-growth). CPython 3.12+'s reference counting is larger inline code, and in
# the big generated files it reached that limit: hot helpers (as_int, wr_uvarint, wr_field)
# stayed calls on 3.13 and not on 3.11. Used where the compiler accepts it.
INLINE_FLAGS = ["--param=inline-unit-growth=100"]
# CPython's own CFLAGS carry -g: the debug sections were 11 of the wheel's 13 MB of
# extension modules. Builds without -g in the CFLAGS they are given (tools/asan.sh gives
# it) compile with -g0; symbol names stay, so profilers still name functions.
NO_DEBUG_FLAGS = [] if "-g" in os.environ.get("CFLAGS", "").split() else ["-g0"]


def path(module, suffix):
    return f"src/{module.replace('.', '/')}{suffix}"


def generate_c():
    """Write each extension's C next to its .pyx (Cython skips files that are up to date)."""
    from Cython.Build import cythonize

    exts = [Extension(m, [path(m, ".pyx")]) for m in MODULES]
    cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)


class BuildExt(build_ext):
    """A failed compile leaves a working pure-Python install, and says so once."""

    def run(self):
        try:
            if not FROM_SDIST:
                try:
                    generate_c()
                except ImportError:
                    raise RuntimeError("Cython is not installed, so there is no C to compile")
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means pure mode
            self._fallback(exc)

    def build_extension(self, ext):
        try:
            for flags in (INLINE_FLAGS, NO_DEBUG_FLAGS):
                if flags and self._accepts(flags):
                    ext.extra_compile_args = [*ext.extra_compile_args, *flags]
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._fallback(exc, [ext])

    def _accepts(self, flags):
        """Whether the compiler builds an empty file with flags, warnings as errors."""
        if not hasattr(self, "_accepted"):
            self._accepted = {}
        key = tuple(flags)
        if key not in self._accepted:
            if self.compiler.compiler_type == "msvc":
                self._accepted[key] = False
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    src = os.path.join(tmp, "flags.c")
                    with open(src, "w") as f:
                        f.write("int main(void) { return 0; }\n")
                    try:
                        self.compiler.compile(
                            [src], output_dir=tmp, extra_postargs=[*flags, "-Werror"]
                        )
                        self._accepted[key] = True
                    except Exception:  # noqa: BLE001 - any failure: build without them
                        self._accepted[key] = False
        return self._accepted[key]

    def _fallback(self, exc, extensions=None):
        if REQUIRE:
            raise exc
        # A module an earlier build left in build/ would be installed as if built now:
        # stale code, under a warning that says pure Python.
        for ext in self.extensions if extensions is None else extensions:
            stale = self.get_ext_fullpath(ext.name)
            if os.path.exists(stale):
                os.remove(stale)
        if not getattr(self, "_warned", False):
            self._warned = True
            print(
                f"WARNING: fastkwire's compiled core could not be built ({exc}); {FALLBACK}. "
                "Install a C compiler and reinstall for the fast implementation.",
                file=sys.stderr,
            )


class Sdist(sdist):
    """Put freshly generated C into the sdist, so building from it needs no Cython."""

    def run(self):
        if not FROM_SDIST:
            generate_c()
        missing = [path(m, ".c") for m in MODULES if not os.path.exists(path(m, ".c"))]
        if missing:
            raise RuntimeError(f"generated C missing, the sdist would need Cython: {missing}")
        super().run()


if os.environ.get("FASTKWIRE_PURE"):
    print(f"FASTKWIRE_PURE is set: {FALLBACK}.", file=sys.stderr)
    setup()
else:
    setup(
        ext_modules=[
            Extension(m, [path(m, ".c")], depends=DEPENDS.get(m, [])) for m in MODULES
        ],
        cmdclass={"build_ext": BuildExt, "sdist": Sdist},
        # Asked of the build frontend only when the C must still be generated.
        setup_requires=[] if FROM_SDIST else ["Cython>=3.2.5"],
    )
