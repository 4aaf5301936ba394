"""Walk plans: a response's layout (the one model of the wire format that both engines
compile) as steps that a reader of its bytes can follow without building its objects.

Two readers follow them: the error-code scan (`_error_scan`, lenient and bounded: it
skips what it does not need) and the address rewriter (`_rewrite`, strict: it checks
every value as decode does, and copies the bytes that name no broker as they came).
A plan says, per struct, what each needs: where its error codes are, whether it
carries a broker's host and port, and whether anything below it does.
"""

from functools import lru_cache

from .. import _wire as W

# What a step is: a fixed-width value, a string, bytes, a struct, an array of structs,
# of fixed-width values, of strings.
FIXED, STRING, BYTES, STRUCT, STRUCTS, FIXED_ARRAY, STRINGS = range(7)
# A step: (what, width or element width, compact, nullable, sub plan, is error_code,
# field name, fewest bytes an element takes (arrays) or the value takes)
WHAT, WIDTH, COMPACT, NULLABLE, SUB, IS_CODE, NAME, MIN_SIZE = range(8)

_WHAT = {
    W.K_STRUCT: STRUCT,
    W.K_STRUCTS: STRUCTS,
    W.K_STRING: STRING,
    W.K_BYTES: BYTES,
    W.K_STRINGS: STRINGS,
    W.K_INTS: FIXED_ARRAY,
    W.K_SCALARS: FIXED_ARRAY,
}
# A broker's address: a struct with a plain string `host` and an integer `port`.
_PORT_KINDS = (W.K_I32, W.K_U16)


class Plan:
    """One struct layout, as steps: plain ops in order, then (flexible) the tagged ones."""

    __slots__ = (
        "steps",
        "tagged",
        "flexible",
        "fixed_size",
        "has_errors",
        "address",
        "holds_addresses",
    )

    def __init__(self, layout):
        self.steps = ()
        self.tagged = {}  # tag -> step
        self.flexible = layout.flexible
        self.fixed_size = None  # bytes it always takes, when it has no error code and no length
        self.has_errors = False
        self.address = None  # (index of the host step, of the port step, the port's kind)
        self.holds_addresses = False  # it, or a struct below it, carries an address


@lru_cache(maxsize=None)
def plan(layout):
    p = Plan(layout)
    steps = []
    fixed, errors, holds = 0, False, False
    host = port = None
    for i, op in enumerate(layout.plain):
        step = _step(op)
        steps.append(step)
        what, width, _, nullable, sub, is_code = step[:6]
        errors = errors or is_code or (sub is not None and sub.has_errors)
        holds = holds or (sub is not None and sub.holds_addresses)
        if op.name == "host" and op.kind == W.K_STRING:
            host = i
        elif op.name == "port" and op.kind in _PORT_KINDS:
            port = (i, op.kind)
        if fixed is not None:
            if what == FIXED:
                fixed += width
            elif what == STRUCT and not nullable and sub.fixed_size is not None:
                fixed += sub.fixed_size
            else:
                fixed = None
    for op in layout.tagged:
        step = _step(op)
        p.tagged[op.field.tag] = step
        if step[SUB] is not None:
            errors = errors or step[SUB].has_errors
            holds = holds or step[SUB].holds_addresses
    if host is not None and port is not None and host < port[0]:
        p.address = (host, port[0], port[1])
        holds = True
    p.steps = tuple(steps)
    p.has_errors = errors
    p.holds_addresses = holds
    p.fixed_size = None if errors or layout.flexible else fixed
    return p


def _step(op):
    sub = plan(op.sub) if op.sub is not None else None
    is_code = op.name == "error_code" and op.kind == W.K_I16
    what = _WHAT.get(op.kind, FIXED)
    least = op.element_min_size() if op.field.is_array else op.min_size()
    return (what, op.width, op.compact, op.nullable, sub, is_code, op.name, least)
