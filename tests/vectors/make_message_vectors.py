"""Write tests/vectors/messages.json: sample messages encoded by a peer (kio, else
kafka-python 3), never by fastkwire, so the vectors are an independent oracle.

    python tests/vectors/make_message_vectors.py
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from peers import DECODE, ENCODE, peer_supports  # noqa: E402
from strategies import (  # noqa: E402
    MESSAGE_NAMES,
    default_value,
    load_schema,
    message_versions,
    present,
    snake_case,
    struct_fields,
)

SAMPLE_INTS = {
    "int8": 3,
    "int16": 25,
    "int32": 300000,
    "int64": 284729,
    "uint16": 9092,
    "uint32": 70000,
}


def nullable(field, version):
    spec = field.get("nullable")
    if not spec:
        return False
    from strategies import versions

    return version in versions(spec)


def sample(schema, fields, version, full, path):
    out = {}
    for field in fields:
        key = snake_case(field["name"])
        if not present(field, version):
            out[key] = default_value(schema, field)
            continue
        t = field["type"]
        sub = struct_fields(schema, field)
        if not full and nullable(field, version):
            out[key] = None
        elif not full:
            out[key] = default_value(schema, field)
            if sub is not None and not t.startswith("[]") and out[key] is None:
                out[key] = sample(schema, sub, version, False, path + key)
        elif sub is not None:
            one = sample(schema, sub, version, True, path + key)
            out[key] = [one, one] if t.startswith("[]") else one
        elif t.startswith("[]"):
            e = t[2:]
            out[key] = ["tópic-a", "b"] if e == "string" else [1, -2, 3] if e != "int16" else [0, 7]
        elif t == "string":
            out[key] = f"{key}-ü-{version}"
        elif t == "bool":
            out[key] = True
        elif key == "error_code":
            out[key] = 25
        elif key == "request_api_key":
            out[key] = 13
        elif key == "request_api_version":
            out[key] = version
        else:
            out[key] = SAMPLE_INTS[t]
    return out


def main():
    vectors = []
    for name in MESSAGE_NAMES:
        schema = load_schema(name)
        for version in message_versions(name):
            for full in (True, False):
                d = sample(schema, schema["fields"], version, full, "")
                for peer in ("kio", "kafka-python"):
                    if peer_supports(peer, name, version):
                        raw = ENCODE[peer](name, version, d)
                        assert DECODE[peer](name, version, raw) == d, (name, version, peer)
                        vectors.append(
                            {
                                "message": name,
                                "version": version,
                                "sample": "full" if full else "minimal",
                                "encoded_by": peer,
                                "hex": raw.hex(),
                                "value": d,
                            }
                        )
                        break
                else:
                    print(f"no peer has {name} v{version}", file=sys.stderr)
    doc = {"about": __doc__.splitlines()[0] + " " + __doc__.splitlines()[1], "vectors": vectors}
    (HERE / "messages.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(vectors)} vectors")


if __name__ == "__main__":
    main()
