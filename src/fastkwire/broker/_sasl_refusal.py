"""A SASL login refused, as every mechanism's server side says it (_credentials.py's PLAIN
and SCRAM, _oauthbearer.py's OAUTHBEARER); _sasl.py answers it."""


class Refused(Exception):
    """A login refused; the message is what the client is told."""


def generic_refusal(mechanism, during="authentication"):
    """Kafka's words when the mechanism's own reason must not reach the client."""
    return (
        f"Authentication failed during {during} due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class Unanswered(Exception):
    """A mechanism's failure Kafka's server does not answer (an error inside it): the
    connection ends without a word to the client."""
