"""What every accelerator for another library (fastkwire.kafka_python, fastkwire.aiokafka)
does the same way: decline on an untested version or without the compiled core, apply a
table of patches all at once, undo them exactly, and act as a pytest plugin.

Each accelerator package makes one Accelerator and exports its bound methods; the seams
(what is patched, and what the compiled helper is bound to) stay in its own _seams.py.
"""

import importlib
import os
import threading
import warnings
from typing import Any, NamedTuple


class Patch(NamedTuple):
    """One binding site: install() sets owner.attribute = replacement, uninstall() puts
    original back."""

    owner: Any
    attribute: str
    original: Any
    replacement: Any


class Accelerator:
    """install()/uninstall()/installed()/patches() and the pytest hooks for one library.

    - package: the accelerator's own name ("fastkwire.aiokafka");
    - library, module: the accelerated library's name in messages and its import name;
    - helper: the compiled module install() needs ("_aiokafka");
    - supported: the library versions it was tested with;
    - declined: versions looked at and declined, each with why (said when install() declines);
    - build_patches(): the seam table (with .patches), or LookupError naming a missing seam;
    - bind(table): hands the table's objects to the compiled helpers before patching;
    - error: the exception raised where install() declines;
    - forget(): called by uninstall() after the originals are back (caches of the
      library's classes)."""

    def __init__(
        self,
        *,
        package,
        library,
        module,
        helper,
        supported,
        build_patches,
        bind,
        error,
        declined=None,
        forget=None,
    ):
        self.package, self.library, self.module = package, library, module
        self.helper, self.supported, self.declined = helper, supported, dict(declined or {})
        self._build_patches, self._bind = build_patches, bind
        self._error, self._forget = error, forget
        self._applied = []  # the Patches set by install(), in order; empty when not installed
        # install() and uninstall() one thread at a time: two installs at once would each
        # find the library unpatched, and the second would take the first's replacements
        # for the originals (a seam then calling itself)
        self._lock = threading.RLock()

    def _decline_reason(self):
        """Why install() must not patch, or None."""
        if os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
            return "FASTKWIRE_PURE is set: the accelerator needs fastkwire's compiled core"
        import fastkwire

        if fastkwire.implementation != "cython":
            return "fastkwire's compiled core is not built: the accelerator needs it"
        try:
            importlib.import_module(f"fastkwire.{self.helper}")
        except ImportError as exc:
            return f"fastkwire's compiled {self.library} helper is missing ({exc})"
        try:
            library = importlib.import_module(self.module)
        except ImportError:
            return f"{self.library} is not installed"
        version = getattr(library, "__version__", "unknown")
        if version in self.declined:
            return f"{self.library} {version} is declined: {self.declined[version]}"
        if version not in self.supported:
            return (
                f"{self.library} {version} is not a version {self.package} was "
                f"tested with (supported: {', '.join(self.supported)})"
            )
        return None

    def _table(self):
        """The seams, or the reason install() must decline: (table, None) or (None, why)."""
        reason = self._decline_reason()
        if reason is not None:
            return None, reason
        try:
            return self._build_patches(), None  # every seam found, or one named missing
        except LookupError as exc:
            return None, f"{self.library} {self._version()}: {exc}"

    def _version(self):
        return importlib.import_module(self.module).__version__

    def unsupported_reason(self):
        """Why install() would decline here (a sentence), or None where it would install."""
        if self._applied:
            return None
        return self._table()[1]

    def install(self, strict=True):
        """Patch the library; True when installed (already installed counts).

        Declines, changing nothing, on an untested version, under FASTKWIRE_PURE=1 or
        without the compiled core: raises the accelerator's Unsupported error, or with
        strict=False warns (RuntimeWarning) and returns False."""
        with self._lock:
            if self._applied:
                return True
            table, reason = self._table()
            if reason is not None:
                if strict:
                    raise self._error(reason)
                warnings.warn(
                    f"{self.package} not installed: {reason}", RuntimeWarning, stacklevel=2
                )
                return False
            self._bind(table)
            for patch in table.patches:  # plain setattr: nothing here can fail half-way
                setattr(patch.owner, patch.attribute, patch.replacement)
                self._applied.append(patch)
            return True

    def uninstall(self):
        """Put back every original install() replaced (no-op when not installed)."""
        with self._lock:
            while self._applied:
                patch = self._applied.pop()
                setattr(patch.owner, patch.attribute, patch.original)
            if self._forget is not None:
                self._forget()

    def installed(self):
        """True while install()'s patches are in place."""
        return bool(self._applied)

    def patches(self):
        """The table install() applies: Patch(owner, attribute, original, replacement) per
        binding site. Raises the accelerator's Unsupported error where install() would
        decline."""
        if self._applied:
            return list(self._applied)
        table, reason = self._table()
        if reason is not None:
            raise self._error(reason)
        return list(table.patches)

    # pytest plugin hooks: `python -m pytest -p PACKAGE`

    def pytest_configure(self, config):
        self.install()

    def pytest_unconfigure(self, config):
        self.uninstall()

    def pytest_report_header(self, config):
        return (
            f"{self.package}: installed={self.installed()} ({self.library} "
            f"{self._version()}, {len(self._applied)} patches)"
        )
