"""Message classes bound to the pure-Python engine (built on first use)."""

from ._family import install
from ._pure_engine import MessageMixin

install(globals(), MessageMixin)
