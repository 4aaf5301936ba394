"""A listener's security protocol, as Kafka names them (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL), and the TLS context of an SSL or SASL_SSL listener from certificate and key files.

The protocol is given as a listener's prefix ("SASL_SSL://127.0.0.1:9093", as in Kafka's
`listeners`) or as `security_protocol`; when neither says, it follows from what is given:
users make it SASL, a certificate makes it SSL.
"""

import ssl

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def split_listener(listener):
    """("PROTOCOL" or None, the address) of "PROTOCOL://host:port" or any other address."""
    if isinstance(listener, str) and "://" in listener:
        protocol, _, address = listener.partition("://")
        if protocol.upper() not in PROTOCOLS:
            raise ValueError(
                f"listeners: {listener!r}: {protocol!r} is not a security protocol "
                f"({', '.join(PROTOCOLS)})"
            )
        return protocol.upper(), address
    return None, listener


def node_listeners(entry):
    """[(PROTOCOL or None, address), ...] of one node's listeners: one address (a (host,
    port) pair, "host:port", "PROTOCOL://host:port"), Kafka's `listeners` value
    ("PLAINTEXT://host:9092,SSL://host:9093") or a list of listener strings."""
    if isinstance(entry, str) and "," in entry:
        entry = [part.strip() for part in entry.split(",")]
    if isinstance(entry, list):
        return [split_listener(part) for part in entry]
    return [split_listener(entry)]


def listener_protocols(given, nodes, sasl, tls):
    """The protocol of each of a node's listeners (every node has the same), from `nodes`
    (node_listeners' lists); ValueError naming the parameter that disagrees. One listener a
    node: its protocol as security_protocol() finds it; several (Kafka's listeners of
    different security protocols side by side): each names its own, once a node."""
    counts = {len(n) for n in nodes}
    if len(counts) > 1:
        raise ValueError(
            "listeners: every node has as many listeners, not "
            + (" and ".join(str(c) for c in sorted(counts)))
        )
    if counts == {1}:
        return (security_protocol(given, [n[0][0] for n in nodes], sasl, tls),)
    protocols = tuple(p for p, _ in nodes[0])
    for node in nodes:
        named = tuple(p for p, _ in node)
        if None in named:
            raise ValueError(
                "listeners: a node with several listeners names each one's protocol "
                "(PLAINTEXT://host:port,SSL://host:port)"
            )
        if len(set(named)) < len(named):
            raise ValueError(f"listeners: {', '.join(named)}: one listener per protocol a node")
        if named != protocols:
            raise ValueError(
                f"listeners: every node has the same listeners, not {', '.join(named)} "
                f"beside {', '.join(protocols)}"
            )
    if given is not None and (not isinstance(given, str) or given.upper() != protocols[0]):
        raise ValueError(f"security_protocol: {given!r}, but the first listener is {protocols[0]}")
    any_sasl = any(p.startswith("SASL_") for p in protocols)
    any_tls = any(p.endswith("SSL") for p in protocols)
    if any_sasl and not sasl:
        raise ValueError("users: a SASL listener needs users ({name: password}) or oauthbearer")
    if sasl and not any_sasl:
        raise ValueError("users: given, but no listener is SASL_PLAINTEXT or SASL_SSL")
    if any_tls and not tls:
        raise ValueError("tls_cert: an SSL or SASL_SSL listener needs a certificate and its key")
    if tls and not any_tls:
        raise ValueError("tls_cert: given, but no listener is SSL or SASL_SSL")
    return protocols


def security_protocol(given, from_listeners, sasl, tls):
    """The one protocol of every listener; ValueError naming the parameter that disagrees."""
    said = set(from_listeners) - {None}
    if len(said) > 1:
        raise ValueError(
            f"listeners: every listener has the same security protocol, not {' and '.join(sorted(said))}"
        )
    if given is not None:
        if not isinstance(given, str) or given.upper() not in PROTOCOLS:
            raise ValueError(f"security_protocol: {given!r} is not one of {', '.join(PROTOCOLS)}")
        given = given.upper()
        if said and said != {given}:
            raise ValueError(f"security_protocol: {given}, but the listeners say {said.pop()}")
    protocol = given or (said.pop() if said else None)
    if protocol is None:
        protocol = ("SASL_" if sasl else "") + ("SSL" if tls else "PLAINTEXT")
    if protocol.startswith("SASL_") and not sasl:
        raise ValueError(
            f"users: a {protocol} listener needs users ({{name: password}}) or oauthbearer"
        )
    if not protocol.startswith("SASL_") and sasl:
        raise ValueError(f"users: given, but the listeners are {protocol} (no SASL)")
    if protocol.endswith("SSL") and not tls:
        raise ValueError(f"tls_cert: a {protocol} listener needs a certificate and its key")
    if protocol.endswith("PLAINTEXT") and tls:
        raise ValueError(f"tls_cert: given, but the listeners are {protocol} (no TLS)")
    return protocol


def server_context(cert, key, password=None, client_cafile=None):
    """An ssl context for a TLS listener: `cert` (PEM, the chain), its `key` (PEM; encrypted
    with `password`); `client_cafile`: clients must present a certificate these CAs signed
    (Kafka's ssl.client.auth=required)."""
    if not cert or not key:
        raise ValueError("tls_cert and tls_key go together")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key, password)
    except (ssl.SSLError, OSError) as e:
        reason = getattr(e, "reason", None) or e.strerror or type(e).__name__
        raise ValueError(
            f"tls_cert/tls_key: cannot load {cert!r} and {key!r}: {reason} (PEM files expected)"
        ) from None
    if client_cafile:
        try:
            context.load_verify_locations(client_cafile)
        except (ssl.SSLError, OSError) as e:
            reason = getattr(e, "reason", None) or e.strerror or type(e).__name__
            raise ValueError(
                f"tls_client_cafile: cannot load {client_cafile!r}: {reason} (PEM expected)"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context
