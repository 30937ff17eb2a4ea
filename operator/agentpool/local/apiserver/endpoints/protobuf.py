"""Decoding the Kubernetes protobuf envelope for the few built-in kinds kubectl sends that way.

``kubectl create configmap|secret|namespace|serviceaccount|service``, ``kubectl create
role|clusterrole|rolebinding|clusterrolebinding|token`` and ``kubectl auth can-i|whoami`` post
``application/vnd.kubernetes.protobuf`` and do not fall back to JSON when refused, so the server
reads that encoding for these kinds: the ``k8s\\0`` magic, a ``runtime.Unknown`` wrapper, then
the object in the field numbers of ``k8s.io/api``'s generated.proto, which ``protobuf.yaml``
beside this module states for the fields read. Zero values are dropped, as JSON's ``omitempty``
drops them. ``handlers`` calls ``decode`` for such bodies.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Container
from importlib import resources
from typing import Any

import yaml

from agentpool.api.conditions import format_time
from agentpool.local.apiserver.errors import ApiError

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

SCALARS = frozenset({"string", "bytes", "bool", "int32", "int64"})

Field = tuple[str, str]
"""A field's JSON name and how to read it: a scalar or message type, ``list:T`` or ``map:T``."""
Message = dict[int, Field]


def _field(name: str, text: str, messages: Container[str]) -> tuple[int, Field]:
    """One field as ``protobuf.yaml`` states it (``13 repeated OwnerReference``)."""
    number, _, kind = text.partition(" ")
    if kind.startswith("repeated "):
        element, wrapper = kind.removeprefix("repeated "), "list:"
    elif (entry := re.fullmatch(r"map<string, (\w+)>", kind)) is not None:
        element, wrapper = entry[1], "map:"
    else:
        element, wrapper = kind, ""
    if element not in SCALARS and element not in messages:
        raise ValueError(f"protobuf.yaml: {name}: {kind!r} is no scalar and no message stated")
    return int(number), (name, wrapper + element)


def _load() -> tuple[tuple[str, ...], dict[str, Message]]:
    """The kinds read and every message's fields, from the table beside this module."""
    table = yaml.safe_load(resources.files(__package__).joinpath("protobuf.yaml").read_text())
    stated: dict[str, dict[str, str]] = table["messages"]
    messages = {
        message: dict(_field(name, text, stated) for name, text in fields.items())
        for message, fields in stated.items()
    }
    return tuple(table["kinds"]), messages


_KINDS, _MESSAGES = _load()


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
    if kind in ("int32", "int64"):
        number = int(value) if isinstance(value, int) else 0
        return number - (1 << 64) if number >= 1 << 63 else number
    message = _message(_MESSAGES[kind], value if isinstance(value, bytes) else b"")
    if kind == "Time":
        if not message.get("seconds"):
            return None
        return format_time(message["seconds"])
    if kind == "IntOrString":
        return message.get("strVal", "") if message.get("type") == 1 else message.get("intVal", 0)
    if kind == "ExtraValue":
        return message.get("items", [])
    return message


def _message(schema: Message, data: bytes) -> dict[str, Any]:
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
            if decoded not in ("", 0, False, {}, None) or kind == "IntOrString":
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
    schema = _MESSAGES.get(kind) if kind in _KINDS else None
    raw = unknown.get(2, b"")
    if schema is None or not isinstance(raw, bytes):
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - protobuf is read for "
            f"{', '.join(sorted(_KINDS))} only; send application/json",
        )
    return {"apiVersion": api_version, "kind": kind, **_message(schema, raw)}
