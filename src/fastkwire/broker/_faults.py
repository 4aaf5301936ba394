"""The proxy's fault rules (fastkwire.proxy's `Rule` and `Faults`: one model, the same keys and
text) applied by the broker to the requests it is sent, before it answers them:
- `error`: the request is answered with the error code (encoded by the codec, as the proxy
  does: the top-level error code, or each partition's for Produce) and not handled; where
  the answer cannot carry it (an acks=0 Produce has none), it is handled as usual;
- `delay_ms`: the request is handled, its answer held that long (and the connection's next
  requests behind it, as Kafka answers in order);
- `disconnect`: "before": the connection ends, the request not handled; "after": it is
  handled, then the connection ends instead of answering.
"""

import logging

from ..errors import DecodeError
from ..proxy._faults import Faults, Rule, RuleError
from ._exchange import Close, error_frame

log = logging.getLogger("fastkwire.broker")

__all__ = ["Faults", "Rule", "RuleError", "as_faults", "as_rule", "apply"]


def as_rule(rule):
    """A Rule from a Rule, a dict of its keys or the command line's `key=value,...` text."""
    if isinstance(rule, Rule):
        return rule
    if isinstance(rule, str):
        return Rule.parse(rule)
    return Rule.from_dict(rule)


def as_faults(faults, seed=None):
    """A Faults from a Faults, or rules as `as_rule` takes them (None: no rules)."""
    if isinstance(faults, Faults):
        return faults
    if isinstance(faults, (str, dict, Rule)):
        faults = [faults]
    return Faults([as_rule(r) for r in faults or ()], seed)


def apply(rule, header, frame, answer, done, loop):
    """Acts on a request the rule picked: `answer(done)` handles it as usual; `done(outcome)`
    gets what the connection writes (bytes, None or a Close)."""
    what = f"{rule.name!r} on API key {header.api_key} v{header.api_version} correlation id {header.correlation_id}"
    if rule.disconnect == "before":
        done(Close(f"fault {what}: disconnected before answering"))
    elif rule.disconnect == "after":
        answer(lambda outcome: done(Close(f"fault {what}: disconnected after answering")))
    elif rule.delay_ms is not None:
        answer(lambda outcome: loop.call_later(rule.delay_ms / 1000, done, outcome))
    else:
        try:
            outcome = error_frame(header, frame, rule.error_code)
        except (ValueError, DecodeError) as e:
            log.warning("fault %s cannot answer (%s); answered as usual instead", what, e)
            answer(done)
            return
        done(outcome)
