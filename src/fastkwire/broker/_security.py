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
        raise ValueError(f"users: a {protocol} listener needs users ({{name: password}})")
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
