"""Message classes bound to the compiled engine (built on first use). Importing this
module raises ImportError when the extension is not built."""

from ._engine import MessageMixin, plain_class
from ._family import install

install(globals(), MessageMixin, make=plain_class)
