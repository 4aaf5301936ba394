"""The TLS handshake of an accepted connection, shared by the proxy's and the broker's
listeners: a light module (the broker imports it without the proxy's server)."""

import asyncio
import socket


async def tls_handshake(fd, protocol_factory, context, timeout):
    """Serve accepted socket `fd` over TLS (`context`) with protocol_factory()'s protocol,
    once its handshake is done within `timeout` seconds. The socket is closed when it is
    not (OSError, ssl.SSLError among them, or asyncio.TimeoutError: raised) or when the
    server closes meanwhile (CancelledError)."""
    sock = socket.socket(fileno=fd)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().connect_accepted_socket(
                protocol_factory,
                sock,
                ssl=context,
                ssl_handshake_timeout=timeout + 1,  # wait_for's comes first
            ),
            timeout,
        )
    except BaseException:
        sock.close()
        raise
