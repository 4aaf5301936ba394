"""Build the compiled core; fall back to a pure-Python install when that is impossible.

Set FASTKWIRE_PURE=1 to skip the extension on purpose.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODULES = ["fastkwire._core", "fastkwire._messages_cython"]


def extensions():
    sources_exist = all(os.path.exists(f"src/{m.replace('.', '/')}.pyx") for m in MODULES)
    try:
        from Cython.Build import cythonize
    except ImportError:
        cythonize = None
    if cythonize is not None and sources_exist:
        exts = [Extension(m, [f"src/{m.replace('.', '/')}.pyx"]) for m in MODULES]
        return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)
    # An sdist ships the generated C, so a C compiler is enough.
    return [Extension(m, [f"src/{m.replace('.', '/')}.c"]) for m in MODULES]


class OptionalBuildExt(build_ext):
    """A failed compile leaves a working pure-Python install, and says so once."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means pure mode
            self._fallback(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._fallback(exc)

    def _fallback(self, exc):
        if not getattr(self, "_warned", False):
            self._warned = True
            print(
                f"WARNING: fastkwire's compiled core could not be built ({exc}); "
                "installing the pure-Python implementation only.",
                file=sys.stderr,
            )


if os.environ.get("FASTKWIRE_PURE"):
    print("FASTKWIRE_PURE is set: installing the pure-Python implementation only.", file=sys.stderr)
    setup()
else:
    setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
