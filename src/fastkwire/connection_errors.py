"""The exceptions of the connection layer (`fastkwire.connection`, `fastkwire.sasl`).

A request over a `Connection` fails with one of these; options that cannot work are a
ValueError (`OptionError` when it is about one of the options). The admin client's errors
(`fastkwire.admin_errors`) subclass these, so `except KafkaTimeoutError` also catches an
`AdminTimeoutError`, while an `except AdminError` never catches a failed Produce.
"""

__all__ = [
    "KafkaClientError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "BadResponseError",
    "AnswerTooLargeError",
    "KafkaBrokerError",
    "NoCommonVersionError",
    "KafkaSecurityError",
    "SaslAuthError",
    "SaslMechanismError",
    "TlsHandshakeError",
    "TlsVerifyError",
    "OptionError",
]


class KafkaClientError(Exception):
    """Base of every error of a request to a broker. `.error` is the Kafka `ErrorCode`, if any."""

    def __init__(self, message, error=None):
        super().__init__(message)
        self.error = error


class KafkaConnectionError(KafkaClientError):
    """A broker could not be reached, or closed or reset the connection."""


class KafkaTimeoutError(KafkaClientError, TimeoutError):
    """No answer (or no connection) within the deadline."""


class BadResponseError(KafkaClientError):
    """The broker's answer could not be decoded, did not match the request, or was too large."""


class AnswerTooLargeError(BadResponseError):
    """The broker announced an answer larger than the request may take; refused unread.
    `.size` is the size it announced, `.limit` the most the request allowed."""

    def __init__(self, message, size, limit):
        super().__init__(message)
        self.size, self.limit = size, limit


class KafkaBrokerError(KafkaClientError):
    """The broker answered with a Kafka error code for the whole request."""


class NoCommonVersionError(KafkaBrokerError):
    """The broker supports no version of the request that this codec has."""


class KafkaSecurityError(KafkaClientError):
    """TLS or SASL failed: a matter of configuration, so it is never retried."""


class SaslAuthError(KafkaSecurityError):
    """The broker refused the credentials (or its SCRAM proof did not match ours)."""


class SaslMechanismError(KafkaSecurityError):
    """The broker does not enable the SASL mechanism asked for."""


class TlsHandshakeError(KafkaSecurityError):
    """The TLS handshake failed (no TLS listener there, no common protocol or cipher)."""


class TlsVerifyError(TlsHandshakeError):
    """The broker's certificate could not be verified, or the broker refused ours."""


class OptionError(ValueError):
    """An option (a parameter) that cannot work.

    The message is a template naming options as `{name}`: str() shows the parameter names
    (or the wording in `said`), and `.render(names)` shows what a caller knows them as (the
    command line: its flags, or a properties key and its file). `.options` lists the names,
    the one at fault first. Values go in as keywords, so a brace in one is not a placeholder.
    """

    def __init__(self, template, *options, said=None, **values):
        self.template, self.options, self.said, self.values = template, options, said or {}, values
        super().__init__(self.render({}))

    def render(self, names):
        """The message with each option named as `names[option]` where `names` has it."""
        return self.template.format(
            **{o: names.get(o, self.said.get(o, o)) for o in self.options}, **self.values
        )
