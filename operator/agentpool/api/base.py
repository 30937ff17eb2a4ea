"""The building blocks every resource model shares: the wire conventions, CEL rules, free JSON.

``ApiModel`` fixes the Kubernetes conventions once (camelCase on the wire, Python names in code,
attribute docstrings as descriptions), so each resource module only states its fields. ``cel``
attaches ``x-kubernetes-validations`` rules to the model or field they guard, and ``AnyJson`` /
``JsonObject`` mark the few values that are the user's own JSON and so keep unknown fields.
``parse_spec`` is how the operator turns a raw ``spec`` dict into a model with an error a user can
act on; ``refuse_below`` holds a value resolved from a spec, built directly, to the model's bounds.
Imported by the resource modules (``pools``, ``runs``, ``leases``) and by the operator.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic.alias_generators import to_camel

JsonDict = dict[str, Any]

PRESERVE = "x-kubernetes-preserve-unknown-fields"
VALIDATIONS = "x-kubernetes-validations"

AnyJson = Annotated[Any, WithJsonSchema({PRESERVE: True})]
"""Any JSON value at all (object, array, string, number, bool): an item, an input, an output."""

JsonObject = Annotated[dict[str, Any], WithJsonSchema({"type": "object", PRESERVE: True})]
"""A JSON object whose shape belongs to someone else (a PodTemplateSpec), kept as it is."""

INT_OR_STRING = "x-kubernetes-int-or-string"
PERCENT_PATTERN = r"^[0-9]+%$"


def check_int_or_percent(value: int | str) -> int | str:
    """Refuse what is neither a count (an integer >= 0) nor a percentage ("25%")."""
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative: give a count >= 0 or a percentage such as 25%")
        return value
    if re.fullmatch(PERCENT_PATTERN, value) is None:
        raise ValueError(
            f"{value!r} is not a count or a percentage: give an integer such as 1, or a"
            " percentage such as 25% (digits then %)"
        )
    return value


IntOrPercent = Annotated[
    int | str,
    AfterValidator(check_int_or_percent),
    WithJsonSchema(
        {
            INT_OR_STRING: True,
            VALIDATIONS: [
                {
                    "rule": "type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",
                    "message": "give a count >= 0 (such as 1) or a percentage (such as 25%)",
                }
            ],
        }
    ),
]
"""A count or a percentage of the desired agents, as Deployment's maxSurge and maxUnavailable."""


def scaled_value(value: int | str, total: int, *, round_up: bool) -> int:
    """A count or percentage (see :data:`IntOrPercent`) as a count out of ``total``, a
    percentage rounded up or down as Deployment rounds it (maxSurge up, maxUnavailable down)."""
    if isinstance(value, int):
        return value
    percent = int(value.removesuffix("%"))
    if round_up:
        return -(-percent * total // 100)
    return percent * total // 100


CONDITION_LIST: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
"""Conditions are a list keyed by type, as in every built-in Kubernetes status."""

ConditionStatus = Literal["True", "False", "Unknown"]

# The pattern metav1.Condition uses for type and reason: one CamelCase word, no spaces.
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
# A DNS-1123 subdomain: what Kubernetes accepts as the name of a pod, ConfigMap or custom resource.
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# The longest label value Kubernetes accepts; a name the operator copies into a label is held to it.
LABEL_VALUE_MAX = 63


class ApiModel(BaseModel):
    """Base of every spec and status model: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON the API server stores: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)

    def to_patch(self) -> dict[str, Any]:
        """A JSON merge patch of the fields given when it was made: camelCase keys, the others
        left as they are stored, and one given as None cleared."""
        return self.model_dump(by_alias=True, mode="json", exclude_unset=True)


@dataclass(frozen=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry: a CEL expression over ``self`` and its message.

    ``message`` must tell the user what to change; ``field_path`` (e.g. ``.maxSize``) points the
    error at a child field; ``reason`` is a Kubernetes cause reason such as
    ``FieldValueForbidden`` or ``FieldValueRequired``.
    """

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def to_schema(self) -> JsonDict:
        entry: JsonDict = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry


def name_rule(kind: str, where: str, labels: str) -> CelRule:
    """A root-level rule refusing a name over ``LABEL_VALUE_MAX`` characters: the name of a
    ``kind`` is the value of ``labels`` on the objects ``where``.

    The API server checks only that a name is a DNS subdomain (253 characters); a name that the
    operator copies into labels must also be a label value. Root-level rules may read
    ``self.metadata.name``, and ``size()`` of a string costs the same whatever its length.
    """
    return CelRule(
        rule=f"self.metadata.name.size() <= {LABEL_VALUE_MAX}",
        message=f"{kind}'s name is a label value {where}, at most {LABEL_VALUE_MAX} characters "
        f"({labels}): choose a shorter name",
    )


def cel(*rules: CelRule) -> JsonDict:
    """A ``json_schema_extra`` carrying CEL rules, for a model's config or a ``Field``."""
    return {VALIDATIONS: [rule.to_schema() for rule in rules]}


class Condition(ApiModel):
    """The latest observation of one aspect of the object's state, as Kubernetes conditions go."""

    type: str = Field(min_length=1, max_length=316, pattern=REASON_PATTERN)
    """The aspect observed, one CamelCase word: Ready, Degraded, Complete, Failed, Suspended,
    Bound, Expired, Waiting."""
    status: ConditionStatus
    """Whether the condition holds: True, False, or Unknown while it cannot yet be told."""
    reason: str | None = Field(default=None, max_length=1024, pattern=REASON_PATTERN)
    """Why the condition is as it is, one CamelCase word a program can match on."""
    message: str | None = Field(default=None, max_length=32768)
    """Why the condition is as it is, as a sentence for people."""
    last_transition_time: datetime | None = None
    """When the status last changed from one value to another."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation of the object this condition was set from."""


class NameRef(ApiModel):
    """A reference to another object in the same namespace, by name."""

    name: str = Field(min_length=1, max_length=253, pattern=NAME_PATTERN)
    """The name of the object, in the same namespace as this one."""


class KeyRef(ApiModel):
    """A reference to one key of a ConfigMap or Secret in the same namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=NAME_PATTERN)
    """The name of the ConfigMap or Secret, in the same namespace as this object."""
    key: str = Field(min_length=1, max_length=253)
    """The key within it."""


class SpecError(ValueError):
    """A spec that does not fit its model; the message names each bad field as ``spec.field``."""

    def __init__(self, kind: str, errors: list[str]) -> None:
        self.kind = kind
        self.errors = errors
        super().__init__(f"invalid {kind}: " + "; ".join(errors))


M = TypeVar("M", bound=BaseModel)


def parse_spec(model: type[M], raw: Mapping[str, Any] | None, *, root: str = "spec") -> M:
    """Validate a raw ``spec`` (or ``status``) dict into ``model``.

    Raises ``SpecError`` whose message lists each problem as ``spec.fieldPath: what is wrong``,
    with the camelCase wire names a user wrote, never pydantic's internals.
    """
    try:
        return model.model_validate(dict(raw or {}))
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            path = root + "".join(
                f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]
            )
            problems.append(f"{path}: {error['msg']}")
        raise SpecError(model.__name__.removesuffix("Spec"), problems) from None


def refuse_below(value: object, least: float, *fields: str, subject: str = "") -> None:
    """Raise ``ValueError`` naming the first of ``fields`` of ``value`` that is below ``least``.

    A spec's model keeps its bounds; a value resolved from a spec (the pool policy, a run's
    settings) keeps them too when a test or a caller builds it directly. ``subject`` opens the
    message (``"run r: "``).
    """
    for name in fields:
        if getattr(value, name) < least:
            raise ValueError(f"{subject}{name} must be >= {least}, not {getattr(value, name)}")
