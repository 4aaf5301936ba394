"""Java-style client properties files (`--command-config`), as kafka-consumer-groups.sh reads
them, turned into this package's security options.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="ops" password="secret";
    ssl.truststore.location=/etc/kafka/ca.pem      # PEM only (no JKS or PKCS12 here)

Understood: security.protocol, sasl.mechanism, sasl.jaas.config (PlainLoginModule and
ScramLoginModule with username and password), ssl.truststore.location and
ssl.truststore.type (PEM), ssl.keystore.location (a PEM file holding certificate and
key) and ssl.keystore.type, ssl.key.password, ssl.endpoint.identification.algorithm (empty:
no host name check). Other keys are ignored. Errors never quote a value.
"""
import re

from ._printable import printable

__all__ = ["read_properties", "parse_properties", "security_options"]

MAX_FILE_BYTES = 1024 * 1024
LOGIN_MODULES = {"PlainLoginModule": ("PLAIN",), "ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512")}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(path):
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the command config {printable(path)!r}: "
                         f"{exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"the command config {printable(path)!r} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return parse_properties(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"the command config {printable(path)!r} is not UTF-8") from None


def _unescape(text):
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


def parse_properties(text):
    """The key/value pairs of a .properties text (comments, continuations, escapes)."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.lstrip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the line continues
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    props = {}
    for line in lines:
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:\s]?\s*(.*)$", line)
        props[_unescape(m.group(1))] = _unescape(m.group(2).rstrip())
    return props


def _jaas(text):
    """(login module's short name, {option: value}) from a sasl.jaas.config value."""
    m = re.match(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", text, re.S)
    if not m:
        raise ValueError("sasl.jaas.config is not 'LoginModuleClass required key=\"value\" ...;'")
    options = {}
    for key, quoted, bare in re.findall(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))', m.group(3)):
        options[key] = _unescape(quoted) if quoted or not bare else bare
    return m.group(1).rsplit(".", 1)[-1], options


def _pem_only(props, kind):
    declared = props.get(f"ssl.{kind}.type", "PEM").strip().upper() or "PEM"
    if declared != "PEM":
        raise ValueError(f"ssl.{kind}.type is {printable(declared, 20)}: only PEM files can be read here "
                         f"(convert it, e.g. with keytool -exportcert -rfc or openssl pkcs12)")


def security_options(props):
    """Security keyword arguments (`fastkwire.connection.Security`) from properties."""
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
            raise ValueError(f"sasl.jaas.config uses {printable(module, 80)}; only PlainLoginModule and "
                             "ScramLoginModule (user name and password) can be used here")
        mechanism = options.get("sasl_mechanism", "PLAIN" if module == "PlainLoginModule" else None)
        if mechanism not in mechanisms:
            raise ValueError(f"sasl.mechanism {printable(mechanism or '(none)', 40)} does not go with "
                             f"{module} (expected {' or '.join(mechanisms)})")
        options["sasl_mechanism"] = mechanism
        if "username" not in jaas or "password" not in jaas:
            raise ValueError("sasl.jaas.config needs username=\"...\" and password=\"...\"")
        options["sasl_plain_username"] = jaas["username"]
        options["sasl_plain_password"] = jaas["password"]
    return options
