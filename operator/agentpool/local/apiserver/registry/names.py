"""The name and label rules of Kubernetes, with the real API server's own wording.

A port of apimachinery's ``validation`` and ``validate/content`` packages (v0.37): object names
(DNS-1123 subdomain for most kinds, DNS-1123 label for namespaces and services, a path segment
for the RBAC kinds),
label keys (an optional DNS subdomain prefix and a name part of at most 63 characters) and
label values (at most 63 characters). Each check returns the messages the real server would,
which ``metadata`` turns into 422 causes. Pure functions; no HTTP, no store.
"""

from __future__ import annotations

import re

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _LABEL_KEY_FMT + ")?"

_DNS1123_LABEL = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)
_LABEL_KEY = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)

_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)

#: What a generated name's prefix is cut to, leaving room for 5 random characters within 63.
GENERATED_PREFIX_LIMIT = 58


def _matches(pattern: re.Pattern[str], value: str) -> bool:
    return pattern.fullmatch(value) is not None


def _size(value: str) -> int:
    """Length as Go counts it: bytes of UTF-8."""
    return len(value.encode())


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def max_bytes_error(length: int) -> str:
    """What v1.37 says of a label key's parts, which it measures in bytes."""
    return f"must be no more than {length} bytes"


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError, double space before each "or" included."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    listed = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {listed}regex used for validation is '{fmt}')"


def dns1123_subdomain(value: str) -> list[str]:
    errors = [max_len_error(253)] if _size(value) > 253 else []
    if not _matches(_DNS1123_SUBDOMAIN, value):
        errors.append(regex_error(_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def dns1123_label(value: str) -> list[str]:
    errors = [max_len_error(63)] if _size(value) > 63 else []
    if not _matches(_DNS1123_LABEL, value):
        if _matches(_DNS1123_SUBDOMAIN, value):
            errors.append("must not contain dots")
        else:
            message = regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc")
            errors.append(message)
    return errors


def label_key(value: str) -> list[str]:
    """content.IsLabelKey: an optional DNS subdomain prefix and '/', then a name part."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _size(prefix) > 253:
                errors.append("prefix part " + max_bytes_error(253))
            errors += [
                "prefix part " + message
                for message in dns1123_subdomain(prefix)
                if message != max_len_error(253)
            ]
    else:
        message = regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        return [
            f"a valid label key {message} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _size(name) > 63:
        errors.append("name part " + max_bytes_error(63))
    if not _matches(_LABEL_KEY, name):
        message = regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        errors.append("name part " + message)
    return errors


def label_value(value: str) -> list[str]:
    errors = [max_len_error(63)] if _size(value) > 63 else []
    if not _matches(_LABEL_VALUE, value):
        examples = ("MyValue", "my_value", "12345")
        errors.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, *examples))
    return errors


#: The kinds whose names are any path segment (``system:discovery`` is a ClusterRole's name).
PATH_SEGMENT_KINDS = frozenset({"roles", "clusterroles", "rolebindings", "clusterrolebindings"})


def path_segment(value: str, *, prefix: bool = False) -> list[str]:
    """A name that only has to fit in a URL path segment, as ``IsPathSegmentName`` checks it."""
    if not prefix and value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in value]


def object_name(kind: str, name: str, *, prefix: bool = False) -> list[str]:
    """The name rule of a kind ("namespaces", "services", the RBAC kinds or anything else);
    ``prefix`` checks a generateName, whose trailing '-' is allowed."""
    if kind in PATH_SEGMENT_KINDS:
        return path_segment(name, prefix=prefix)
    if prefix and len(name) > 1 and name.endswith("-"):
        name = name[:-2] + "a"
    if kind == "namespaces":
        return dns1123_label(name)
    if kind == "services":
        # v1.37 relaxed Service names to DNS-1123 labels, as namespaces have (KEP 5311).
        return dns1123_label(name)
    return dns1123_subdomain(name)


def generated_prefix(prefix: str) -> str:
    """A generateName cut as the real server cuts it before adding the random suffix."""
    return prefix[:GENERATED_PREFIX_LIMIT]
