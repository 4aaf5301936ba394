"""What the two message modules (`_messages_python`, `_messages_cython`) share: a module
whose message classes, and REQUEST_CLASSES/RESPONSE_CLASSES, are built on first use."""
from . import _framing
from ._classes import Family
from .errors import DecodeError, EncodeError, UnsupportedVersionError

# Old names of APIs Kafka renamed: each is the same class as the new name (the converter
# lists the renames in tools/schema_sources.json; KIP-1142 renamed API 74).
ALIASES = {
    "ListClientMetricsResourcesRequest": "ListConfigResourcesRequest",
    "ListClientMetricsResourcesResponse": "ListConfigResourcesResponse",
}


def install(module_globals, mixin):
    """Turn a module into the home of one engine's message classes."""
    family = Family(module_globals["__name__"], mixin)
    requests = family.by_api_key("request")
    responses = family.by_api_key("response")
    encode_request, decode_request, encode_response, decode_response = _framing.bind(
        family.get, requests, responses)
    names = list(family.names())
    module_globals.update(
        FAMILY=family, REQUEST_CLASSES=requests, RESPONSE_CLASSES=responses,
        encode_request=encode_request, decode_request=decode_request,
        encode_response=encode_response, decode_response=decode_response,
        DecodeError=DecodeError, EncodeError=EncodeError, UnsupportedVersionError=UnsupportedVersionError,
        __all__=names + list(ALIASES) + ["REQUEST_CLASSES", "RESPONSE_CLASSES", "MESSAGE_CLASSES", "encode_request",
                         "decode_request", "encode_response", "decode_response", "DecodeError",
                         "EncodeError", "UnsupportedVersionError"],
    )

    def __getattr__(name):
        if name == "MESSAGE_CLASSES":  # every message: built only when asked for
            classes = tuple(family.get(n) for n in names)
            module_globals[name] = classes
            return classes
        if name.startswith("__"):
            raise AttributeError(name)
        cls = family.get(ALIASES.get(name, name))
        module_globals[name] = cls  # later lookups are plain attribute reads
        return cls

    def __dir__():
        return sorted(set(module_globals) | set(names) | set(ALIASES))

    module_globals["__getattr__"] = __getattr__
    module_globals["__dir__"] = __dir__
