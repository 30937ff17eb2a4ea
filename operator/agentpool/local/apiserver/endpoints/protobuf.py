"""Decoding the Kubernetes protobuf envelope for the few built-in kinds kubectl sends that way.

``kubectl create configmap|secret|namespace|serviceaccount|service`` posts
``application/vnd.kubernetes.protobuf`` and does not fall back to JSON when refused, so the
server reads that encoding for these kinds: the ``k8s\\0`` magic, a ``runtime.Unknown`` wrapper,
then the object in the field numbers of ``k8s.io/api``'s generated.proto. Zero values are
dropped, as JSON's ``omitempty`` drops them. ``handlers`` calls ``decode`` for such bodies.
"""

from __future__ import annotations

import base64
from typing import Any

from agentpool.api.conditions import format_time
from agentpool.local.apiserver.errors import ApiError

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Field = tuple[str, str]
_TIME: dict[int, Field] = {1: ("seconds", "int"), 2: ("nanos", "int")}
_OWNER: dict[int, Field] = {
    1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
    5: ("apiVersion", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool"),
}  # fmt: skip
_META: dict[int, Field] = {
    1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
    5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
    8: ("creationTimestamp", "time"), 11: ("labels", "map:string"),
    12: ("annotations", "map:string"), 13: ("ownerReferences", "list:owner"),
    14: ("finalizers", "list:string"),
}  # fmt: skip
_INT_OR_STRING: dict[int, Field] = {
    1: ("type", "int"),
    2: ("intVal", "int"),
    3: ("strVal", "string"),
}
_PORT: dict[int, Field] = {
    1: ("name", "string"), 2: ("protocol", "string"), 3: ("port", "int"),
    4: ("targetPort", "intorstring"), 5: ("nodePort", "int"), 6: ("appProtocol", "string"),
}  # fmt: skip
_SERVICE_SPEC: dict[int, Field] = {
    1: ("ports", "list:port"), 2: ("selector", "map:string"), 3: ("clusterIP", "string"),
    4: ("type", "string"), 7: ("sessionAffinity", "string"), 11: ("externalName", "string"),
}  # fmt: skip
_NAMESPACE_SPEC: dict[int, Field] = {1: ("finalizers", "list:string")}
_LOCAL_REF: dict[int, Field] = {1: ("name", "string")}
_OBJECT_REF: dict[int, Field] = {1: ("kind", "string"), 2: ("namespace", "string"),
                                 3: ("name", "string")}  # fmt: skip

_KINDS: dict[str, dict[int, Field]] = {
    "ConfigMap": {1: ("metadata", "meta"), 2: ("data", "map:string"),
                  3: ("binaryData", "map:bytes"), 4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "meta"), 2: ("data", "map:bytes"), 3: ("type", "string"),
               4: ("stringData", "map:string"), 5: ("immutable", "bool")},
    "Namespace": {1: ("metadata", "meta"), 2: ("spec", "nsspec")},
    "ServiceAccount": {1: ("metadata", "meta"), 2: ("secrets", "list:objref"),
                       3: ("imagePullSecrets", "list:localref"),
                       4: ("automountServiceAccountToken", "bool")},
    "Service": {1: ("metadata", "meta"), 2: ("spec", "svcspec")},
}  # fmt: skip
_MESSAGES: dict[str, dict[int, Field]] = {
    "meta": _META, "owner": _OWNER, "port": _PORT, "svcspec": _SERVICE_SPEC,
    "nsspec": _NAMESPACE_SPEC, "localref": _LOCAL_REF, "objref": _OBJECT_REF,
    "time": _TIME, "intorstring": _INT_OR_STRING,
}  # fmt: skip


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """Raw (field number, value) pairs of one message."""
    pos, found = 0, []
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        found.append((number, value))
    return found


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "string":
        return value.decode() if isinstance(value, bytes) else str(value)
    if kind == "bytes":
        return base64.b64encode(value if isinstance(value, bytes) else b"").decode()
    if kind == "bool":
        return bool(value)
    if kind == "int":
        number = int(value) if isinstance(value, int) else 0
        return number - (1 << 64) if number >= 1 << 63 else number
    message = _message(_MESSAGES[kind], value if isinstance(value, bytes) else b"")
    if kind == "time":
        if not message.get("seconds"):
            return None
        return format_time(message["seconds"])
    if kind == "intorstring":
        return message.get("strVal", "") if message.get("type") == 1 else message.get("intVal", 0)
    return message


def _message(schema: dict[int, Field], data: bytes) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind.startswith("map:"):
            entry = dict(_fields(value if isinstance(value, bytes) else b""))
            key = _scalar("string", entry.get(1, b""))
            result.setdefault(name, {})[key] = _scalar(kind[4:], entry.get(2, b""))
        elif kind.startswith("list:"):
            result.setdefault(name, []).append(_scalar(kind[5:], value))
        else:
            decoded = _scalar(kind, value)
            if decoded not in ("", 0, False, {}, None) or kind == "intorstring":
                result[name] = decoded
    return result


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded built-in object."""
    if not body.startswith(MAGIC):
        raise ApiError(415, "UnsupportedMediaType", "protobuf body without the k8s envelope")
    unknown = dict(_fields(body[len(MAGIC) :]))
    wrapped = unknown.get(1, b"")
    type_meta = dict(_fields(wrapped if isinstance(wrapped, bytes) else b""))
    api_version = _scalar("string", type_meta.get(1, b""))
    kind = _scalar("string", type_meta.get(2, b""))
    schema = _KINDS.get(kind)
    raw = unknown.get(2, b"")
    if schema is None or not isinstance(raw, bytes):
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - protobuf is read for "
            f"{', '.join(sorted(_KINDS))} only; send application/json",
        )
    return {"apiVersion": api_version, "kind": kind, **_message(schema, raw)}
