"""kafka-python's protocol messages through fastkwire's compiled engine.

kafka-python encodes and decodes an ApiMessage with functions it generates per message
and version (`StructField.compiled_encode_into` / `compiled_decode_from`). The
accelerator replaces those two methods: for a message and version whose kafka-python
schema matches fastkwire's field for field (types, versions, tags, nullability), they
return the engine's target codecs, which fill kafka-python's own classes; for anything
else, kafka-python's own functions.

The match is checked per (message, version), against kafka-python's schema as its
classes hold it (json_patch changes included: authorized-operations fields are sets of
bits there). A mismatch is not an error: that version runs stock. `coverage()` says which
versions run on the engine.
"""

import threading

from fastkwire import _engine, _layout, _schema, _wire

# Reentrant: making a codec runs Python code and allocates, so a gc callback on the same
# thread may uninstall() meanwhile, whose clear() takes the lock again (a Lock deadlocked).
_lock = threading.RLock()
_codecs = {}  # (id(struct), version, compact, tagged, data_class) -> (struct, decoder, encoder)
_originals = {}  # "decode"/"encode" -> kafka-python's own StructField methods (bind())


class Mismatch(Exception):
    """kafka-python's schema and fastkwire's disagree for this version (the reason)."""


class StructTarget:
    """A kafka-python class at one version, as the engine's target plans take it."""

    __slots__ = ("cls", "version", "single", "fields")

    def __init__(self, cls, version, single, fields):
        self.cls = cls
        self.version = version
        self.single = single  # one untagged field: array items may be bare values
        self.fields = fields  # per layout op (None where absent)


class FieldTarget:
    __slots__ = ("name", "default", "conv", "sub")

    def __init__(self, name, default, conv, sub):
        self.name = name  # kafka-python's attribute (a slot of the class)
        self.default = default  # what reading an unset attribute gives
        self.conv = conv  # _engine.C_*: how kafka-python holds the value
        self.sub = sub  # StructTarget of a struct field


def bind(decode, encode):
    """kafka-python's own compiled_decode_from / compiled_encode_into."""
    _originals["decode"] = decode
    _originals["encode"] = encode


def clear():
    with _lock:
        _codecs.clear()


def _default(kp_field):
    try:
        return kp_field.default
    except Exception:  # kafka-python raises for struct fields without one: so do we
        return _engine.NO_DEFAULT


def _struct_of(kp_field):
    from kafka.protocol.schemas.fields import StructField

    return kp_field if isinstance(kp_field, StructField) else kp_field.array_of


def build_target(kp_struct, layout, version, cls):
    """StructTarget of kafka-python's StructField at version against our layout, or
    Mismatch naming the first difference."""
    kp_fields = kp_struct._fields or ()
    ops = layout.ops
    where = layout.struct.name
    if len(kp_fields) != len(ops):
        raise Mismatch(f"{where}: {len(kp_fields)} fields in kafka-python, {len(ops)} here")
    flexible = layout.flexible
    fields = []
    untagged = 0
    for kf, op in zip(kp_fields, ops):
        f = op.field
        present = kf.for_version_q(version)
        if present != (op.mode != "absent"):
            raise Mismatch(f"{where}.{f.name}: in version {version} on one side only")
        if not present:
            fields.append(None)
            continue
        tagged = kf.tagged_field_q(version)
        if tagged != (op.mode == "tagged") or (tagged and kf.tag != f.tag):
            raise Mismatch(f"{where}.{f.name}: tagged differently")
        if not tagged:
            untagged += 1
        kind = kf._type_str
        conv = _engine.C_NONE
        if kind == "bitfield" and f.type == "int32":
            conv = _engine.C_BITFIELD  # json_patch: flag bits as a set (and renamed)
        elif kind != f.type:
            raise Mismatch(f"{where}.{f.name}: type {kind} there, {f.type} here")
        else:
            if f.element_type == "uuid":
                conv = _engine.C_UUID_NONE  # kafka-python reads the zero UUID as None
            if kf.name != _schema.snake_case(f.name):
                raise Mismatch(f"{where}.{f.name}: named {kf.name} there")
        if kf._flexible_versions is not None or op.compact != flexible:
            raise Mismatch(f"{where}.{f.name}: its own flexible versions")
        sub = None
        if f.is_struct:
            if kf.nullable_for_version_q(version) != op.nullable:
                raise Mismatch(f"{where}.{f.name}: nullable differently")
            kp_sub = _struct_of(kf)
            sub = build_target(kp_sub, op.sub, version, kp_sub.data_class)
        elif op.kind == _wire.K_SCALARS and op.width is None:
            raise Mismatch(f"{where}.{f.name}: arrays of {f.element_type}")
        fields.append(FieldTarget(kf.name, _default(kf), conv, sub))
    return StructTarget(cls, version, untagged == 1, fields)


def _message_layout(kp_struct, version):
    json = kp_struct._json
    if json.get("type") not in ("request", "response") or "apiKey" not in json:
        raise Mismatch("not a request or response")
    try:
        layouts = _layout.layouts(json["name"])
    except OSError:
        raise Mismatch(f"no {json['name']} here") from None
    message = layouts.message
    if message.api_key != json["apiKey"] or version not in message.versions:
        raise Mismatch(f"{json['name']} v{version}: not a version here")
    return layouts.root(version)


def codecs(kp_struct, version, compact, tagged, data_class):
    """(decoder, encoder) for kafka-python's StructField at version: the engine's target
    codecs, or kafka-python's own functions (made lazily) where the schemas differ."""
    key = (id(kp_struct), version, compact, tagged, data_class)
    entry = _codecs.get(key)
    if entry is not None:
        return entry[1], entry[2]
    with _lock:
        entry = _codecs.get(key)
        if entry is None:
            entry = (kp_struct,) + _make(kp_struct, version, compact, tagged, data_class)
            _codecs[key] = entry  # the struct kept alive: its id stays its own
    return entry[1], entry[2]


def _make(kp_struct, version, compact, tagged, data_class):
    def stock_decoder():
        return _originals["decode"](kp_struct, version, compact, tagged, data_class)

    def stock_encoder():
        return _originals["encode"](kp_struct, version, compact, tagged)

    try:
        layout = _message_layout(kp_struct, version)
        if compact != layout.flexible or tagged != layout.flexible:
            raise Mismatch("compact or tagged is not the version's flexibility")
        cls = data_class if data_class is not None else kp_struct.data_class[None]
        return _engine.target_codecs(
            layout, build_target(kp_struct, layout, version, cls), stock_decoder, stock_encoder
        )
    except Mismatch:
        return stock_decoder(), stock_encoder()


def compiled_decode_from(self, version, compact=False, tagged=False, data_class=None):
    """kafka-python's StructField.compiled_decode_from, on fastkwire's engine."""
    return codecs(self, version, compact, tagged, data_class)[0]


def compiled_encode_into(self, version, compact=False, tagged=False):
    """kafka-python's StructField.compiled_encode_into, on fastkwire's engine."""
    return codecs(self, version, compact, tagged, None)[1]


def coverage(message_classes):
    """{(class name, version): None if on the engine, else the reason it runs stock}."""
    out = {}
    for cls in message_classes:
        for version in range(cls.min_version, cls.max_version + 1):
            try:
                layout = _message_layout(cls._struct, version)
                build_target(cls._struct, layout, version, cls)
                out[(cls.__name__, version)] = None
            except Mismatch as exc:
                out[(cls.__name__, version)] = str(exc)
    return out
