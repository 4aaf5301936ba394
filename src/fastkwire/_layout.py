"""Wire layouts: how each field of a struct travels in one version of its message.

The one model of the wire format: both engines compile it (explain observes the pure
engine reading it). A `Layout` is computed from the schema definitions (`_schema`) the
first time a (struct, version) is used; versions whose layouts are the same share one
object, so an engine compiles each distinct layout once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from . import _schema as S
from . import _wire as W
from ._wire import min_size


@dataclass(frozen=True, eq=False)
class Op:
    """One field in one version."""

    field: S.Field
    mode: str  # "plain", "tagged" or "absent"
    nullable: bool
    compact: bool
    sub: "Layout | None"  # the nested struct's layout, for struct and []struct fields
    columns: str | None  # columnar form of a []struct field (schema "columns"), if any

    @property
    def name(self) -> str:
        return self.field.py_name

    @property
    def default(self):
        return default_value(self.field)

    # The wire table's numbers for this field, worked out here once: the compiled engine
    # copies them into its plans.
    @cached_property
    def kind(self) -> int:
        """How the field travels: one of _wire's K_ kinds."""
        f = self.field
        if f.is_struct:
            return W.K_STRUCTS if f.is_array else W.K_STRUCT
        if f.is_array:
            elem = f.element_type
            return (
                W.K_INTS
                if elem in W.BULK_INTS
                else W.K_STRINGS
                if elem == "string"
                else W.K_SCALARS
            )
        return W.PRIMITIVES[f.type].kind

    @cached_property
    def elem_kind(self) -> int | None:
        """The kind of an array's elements (None for structs and non-arrays)."""
        f = self.field
        if not f.is_array or f.is_struct:
            return None
        return W.PRIMITIVES[f.element_type].kind

    @cached_property
    def width(self) -> int | None:
        """The fixed width of the value, or of an array's elements (None if not fixed)."""
        f = self.field
        return W.WIDTH.get(f.element_type if f.is_array else f.type)

    @cached_property
    def default_kind(self) -> int:
        return default_kind(self.field)

    @cached_property
    def records(self) -> bool:
        """A records field (bytes holding record batches: records="view" slices them)."""
        return self.field.type == "records"

    def min_size(self) -> int:
        """Fewest bytes the field takes on the wire (for 'count fits the bytes left')."""
        f = self.field
        if f.is_array:
            return 1 if self.compact else 4
        if f.is_struct:
            return 1 if self.nullable else self.sub.min_size
        return min_size(f.type, self.compact)

    def element_min_size(self) -> int:
        """Fewest bytes one element of an array field takes."""
        if self.sub is not None:
            return self.sub.min_size
        return min_size(self.field.element_type, self.compact)


@dataclass(eq=False)
class Layout:
    struct: S.Struct
    message: S.Message
    flexible: bool
    ops: tuple  # every field of the struct, in schema order
    ident: int  # distinct layouts of one struct are numbered 0, 1, ...
    min_size: int = 0

    @property
    def plain(self):
        return [op for op in self.ops if op.mode == "plain"]

    @property
    def tagged(self):
        return sorted((op for op in self.ops if op.mode == "tagged"), key=lambda op: op.field.tag)

    @property
    def absent(self):
        return [op for op in self.ops if op.mode == "absent"]


def default_value(f: S.Field):
    """The Python default of a field (a new empty list for arrays)."""
    d = f.default_value()
    return [] if d == [] else d


def default_kind(f: S.Field) -> int:
    """How a field's default is made and tested, one of _wire's D_ kinds: the one
    answer that the engines, the classes' constructors and explain all use."""
    if makes_struct(f):
        return W.D_NEW
    d = f.default_value()
    if d == [] and type(d) is list:
        return W.D_LIST
    if d is None or d is True or d is False:
        return W.D_IS
    return W.D_VALUE


def makes_struct(f: S.Field) -> bool:
    """A struct field that is never null: its default is a new struct of defaults."""
    return f.is_struct and not f.is_array and not f.has_default and f.nullable.low > f.nullable.high


class MessageLayouts:
    """Layouts of one message, computed on demand and deduplicated per struct."""

    def __init__(self, message: S.Message):
        self.message = message
        self._by_signature: dict = {}  # struct name -> {signature: Layout}
        self._by_version: dict = {}  # (struct name, version) -> Layout

    def get(self, struct: S.Struct, version: int) -> Layout:
        key = (struct.name, version)
        lay = self._by_version.get(key)
        if lay is not None:
            return lay
        m = self.message
        flexible = m.is_flexible(version)
        ops = []
        for f in struct.fields:
            present = f.present(version)
            sub = self.get(f.struct, version) if f.is_struct and present else None
            mode = "absent" if not present else "tagged" if f.is_tagged(version) else "plain"
            compact = flexible if f.flexible_override is None else version in f.flexible_override
            ops.append(
                Op(
                    f,
                    mode,
                    f.is_nullable(version),
                    compact,
                    sub,
                    f.columns if sub is not None else None,
                )
            )
        sig = (
            flexible,
            tuple(
                (op.field.name, op.mode, op.nullable, op.compact, op.sub.ident if op.sub else None)
                for op in ops
            ),
        )
        table = self._by_signature.setdefault(struct.name, {})
        lay = table.get(sig)
        if lay is None:
            lay = Layout(struct, m, flexible, tuple(ops), len(table))
            lay.min_size = max(1, (1 if flexible else 0) + sum(op.min_size() for op in lay.plain))
            table[sig] = lay
        self._by_version[key] = lay
        return lay

    def root(self, version: int) -> Layout:
        return self.get(self.message.root, version)


@lru_cache(maxsize=None)
def layouts(message_name: str) -> MessageLayouts:
    return MessageLayouts(S.load(message_name))


def version_text(vs: S.Versions) -> str:
    if vs.high >= 1 << 15:
        return f"{vs.low}+"
    if vs.low > vs.high:
        return "none"
    return f"{vs.low}" if vs.low == vs.high else f"{vs.low}-{vs.high}"
