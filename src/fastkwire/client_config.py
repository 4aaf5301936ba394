"""Java-style client properties files (`--command-config`), as kafka-consumer-groups.sh reads
them, turned into this package's security options.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="ops" password="secret";
    ssl.truststore.location=/etc/kafka/ca.pem      # PEM only (no JKS or PKCS12 here)

Understood: security.protocol, sasl.mechanism, sasl.jaas.config (one PlainLoginModule or
ScramLoginModule with username and password), ssl.truststore.location and
ssl.truststore.type (PEM), ssl.keystore.location (a PEM file holding certificate and
key) and ssl.keystore.type, ssl.key.password, ssl.endpoint.identification.algorithm (empty:
no host name check). Other keys are ignored with a warning (`UnusedConfigWarning`), as
Kafka's clients warn of configs they do not know. Errors never quote a value: a trailing
backslash joins the next line to a value, and that line may hold a password.
"""

import os
import re
import stat
import warnings

from ._printable import printable
from .sasl import MECHANISMS

__all__ = [
    "read_properties",
    "parse_properties",
    "security_options",
    "UnusedConfigWarning",
    "KNOWN_KEYS",
]

MAX_FILE_BYTES = 1024 * 1024
LOGIN_MODULES = {
    "PlainLoginModule": ("PLAIN",),
    "ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
KNOWN_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
STORE_TYPES = ("PEM", "JKS", "PKCS12")  # names Kafka knows, so they can be quoted
KNOWN_MECHANISMS = (*MECHANISMS, "GSSAPI")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_PROPERTY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)+")


class UnusedConfigWarning(UserWarning):
    """A properties key that is not used here (unknown, misspelt, or not supported)."""


def read_properties(path):
    """The key/value pairs of the properties file at `path`: a regular file of at most 1 MiB
    of UTF-8 (a FIFO or a device could block or never end, so they are refused)."""
    problem, data = None, None
    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        problem = exc.strerror or type(exc).__name__
    else:
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                problem = "not a regular file"
            else:
                data = f.read(MAX_FILE_BYTES + 1)
    if problem is None and len(data) > MAX_FILE_BYTES:
        problem = f"larger than {MAX_FILE_BYTES} bytes"
    if problem is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            problem = "not UTF-8"  # raised below: the decode error holds the file's bytes
    if problem is not None:
        raise ValueError(f"cannot read the command config {printable(path)!r}: {problem}")
    return parse_properties(text)


def _unescape(text):
    """Backslash escapes as Java's StreamTokenizer reads them in a JAAS string."""
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text, flags=re.S)


def _unescape_property(text):
    """Backslash escapes as Java's Properties reads them, \\uXXXX included."""

    def one(m):
        if m.group(1) is not None:
            return chr(int(m.group(1), 16))
        if m.group(2) == "u":
            raise ValueError(
                "the command config has a malformed \\uXXXX escape (four hex digits expected)"
            )
        return _ESCAPES.get(m.group(2), m.group(2))

    text = re.sub(r"\\(?:u([0-9a-fA-F]{4})|(.))", one, text, flags=re.S)
    # \uD83D\uDE00 is one character: Java strings are UTF-16. Lone surrogates stay as they are.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _logical_lines(text):
    """The lines of a .properties text, comments dropped and continuations joined."""
    pending = None
    for raw in text.splitlines():
        line = raw.lstrip()
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the line continues
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending is not None:
        yield pending


# A key ends at the first unescaped '=', ':' or whitespace; each part is linear (no nested repeats).
_KEY = re.compile(r"(?:\\.|[^=:\s\\])*", re.S)
_SEPARATOR = re.compile(r"\s*[=:]?\s*")


def parse_properties(text):
    """The key/value pairs of a .properties text (comments, continuations, escapes)."""
    props = {}
    for line in _logical_lines(text):
        key = _KEY.match(line)
        value = line[_SEPARATOR.match(line, key.end()).end() :]
        props[_unescape_property(key.group())] = _unescape_property(value.rstrip())
    return props


# sasl.jaas.config, as Kafka's JaasConfig reads it: words, "quoted strings", '=' and ';'.
_JAAS_TOKEN = re.compile(r'\s*(?:([=;])|"((?:[^"\\]|\\.)*)"|([^\s=;"]+))', re.S)
_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAAS_FORM = "sasl.jaas.config is not 'LoginModuleClass required key=\"value\" ...;'"


def _jaas_tokens(text):
    """(kind, text) tokens: 'op' for = and ;, 'word', 'quoted'; linear in the text's length."""
    tokens, pos, end = [], 0, len(text.rstrip())
    while pos < end:
        m = _JAAS_TOKEN.match(text, pos)
        if m is None:  # only a quote that is never closed fails to match
            raise ValueError("sasl.jaas.config has a quote that is never closed")
        op, quoted, word = m.groups()
        tokens.append(
            ("op", op)
            if op
            else ("quoted", _unescape(quoted))
            if quoted is not None
            else ("word", word)
        )
        pos = m.end()
    return tokens


def _jaas(text):
    """(login module's short name, {option: value}) from a sasl.jaas.config value."""
    tokens = _jaas_tokens(text)
    if (
        len(tokens) < 3
        or tokens[0][0] != "word"
        or tokens[1][0] != "word"
        or tokens[1][1].lower() not in _FLAGS
    ):
        raise ValueError(_JAAS_FORM)
    options, i = {}, 2
    while tokens[i] != ("op", ";"):
        if (
            i + 3 > len(tokens)
            or tokens[i][0] != "word"
            or tokens[i + 1] != ("op", "=")
            or tokens[i + 2][0] == "op"
        ):
            raise ValueError(_JAAS_FORM)
        options[tokens[i][1]] = tokens[i + 2][1]
        i += 3
        if i == len(tokens):
            raise ValueError("sasl.jaas.config must end its login module with ';'")
    if i + 1 < len(tokens):
        # Kafka refuses more than one login module; merging their options would be a guess.
        raise ValueError(
            "sasl.jaas.config holds more than one login module: Kafka takes exactly one"
        )
    return tokens[0][1].rsplit(".", 1)[-1], options


def _pem_only(props, kind):
    declared = props.get(f"ssl.{kind}.type", "PEM").strip().upper() or "PEM"
    if declared != "PEM":
        named = declared if declared in STORE_TYPES else "not PEM"
        raise ValueError(
            f"ssl.{kind}.type is {named}: only PEM files can be read here "
            f"(convert it, e.g. with keytool -exportcert -rfc or openssl pkcs12)"
        )


def _warn_unused(props, warn):
    for key in props:
        if key not in KNOWN_KEYS:
            # A key that is no property name may be a stray line: a secret, so not shown.
            named = (
                repr(key)
                if _PROPERTY_NAME.fullmatch(key) and len(key) <= 100
                else "(a key that is not shown)"
            )
            message = f"the command config's key {named} is not used here (unknown, misspelt or not supported)"
            if warn is None:
                warnings.warn(message, UnusedConfigWarning, stacklevel=3)
            else:
                warn(message)


# The key each security option comes from (for messages that name what the user wrote).
OPTION_KEYS = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "ssl_cafile": "ssl.truststore.location",
    "ssl_certfile": "ssl.keystore.location",
    "ssl_keyfile": "ssl.keystore.location",
    "ssl_password": "ssl.key.password",
    "ssl_check_hostname": "ssl.endpoint.identification.algorithm",
    "sasl_plain_username": "sasl.jaas.config",
    "sasl_plain_password": "sasl.jaas.config",
}


def security_options(props, warn=None):
    """Security keyword arguments (`fastkwire.connection.Security`) from properties. Keys
    that are not used here are ignored with an `UnusedConfigWarning`, or passed to
    `warn(message)` when it is given."""
    _warn_unused(props, warn)
    options = {}
    if "security.protocol" in props:
        options["security_protocol"] = props["security.protocol"].strip().upper()
    if "sasl.mechanism" in props:
        options["sasl_mechanism"] = props["sasl.mechanism"].strip().upper()
    if props.get("ssl.truststore.location"):
        _pem_only(props, "truststore")
        options["ssl_cafile"] = props["ssl.truststore.location"].strip()
    if props.get("ssl.keystore.location"):
        _pem_only(props, "keystore")
        options["ssl_certfile"] = options["ssl_keyfile"] = props["ssl.keystore.location"].strip()
    if props.get("ssl.key.password"):
        options["ssl_password"] = props["ssl.key.password"]
    if props.get("ssl.endpoint.identification.algorithm", None) == "":
        options["ssl_check_hostname"] = False
    if props.get("sasl.jaas.config"):
        module, jaas = _jaas(props["sasl.jaas.config"])
        mechanisms = LOGIN_MODULES.get(module)
        if mechanisms is None:
            named = (
                printable(module, 80) if module.endswith("LoginModule") else "another login module"
            )
            raise ValueError(
                f"sasl.jaas.config uses {named}; only PlainLoginModule and "
                "ScramLoginModule (user name and password) can be used here"
            )
        mechanism = options.get("sasl_mechanism", "PLAIN" if module == "PlainLoginModule" else None)
        if mechanism not in mechanisms:
            named = (
                mechanism
                if mechanism in KNOWN_MECHANISMS
                else "(none)"
                if mechanism is None
                else "(unknown)"
            )
            raise ValueError(
                f"sasl.mechanism {named} does not go with {module} (expected {' or '.join(mechanisms)})"
            )
        options["sasl_mechanism"] = mechanism
        if "username" not in jaas or "password" not in jaas:
            raise ValueError('sasl.jaas.config needs username="..." and password="..."')
        options["sasl_plain_username"] = jaas["username"]
        options["sasl_plain_password"] = jaas["password"]
    return options
