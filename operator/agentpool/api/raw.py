"""Typed views of Kubernetes objects as the API server sends them: the raw JSON, keys as on the
wire.

A spec or status the operator decides on is read into its model (``parse_spec``,
``AgentLeaseStatus.model_validate``); what stays raw (an object as a watch event or a listing
gives it, passed on to be read a field at a time) is a :class:`RawBody`, so mypy knows
``metadata`` and its fields by name. Every key may be missing, as on the wire. :func:`raw_body`
takes kopf's body, or any mapping, as one; :func:`raw_items` a listing's items; :func:`uid_of`
tells objects of one name apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast


class RawOwnerReference(TypedDict, total=False):
    """``metadata.ownerReferences[]``: the object that owns this one."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class RawMeta(TypedDict, total=False):
    """``metadata``: who the object is."""

    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[RawOwnerReference]
    finalizers: list[str]


class RawBody(TypedDict, total=False):
    """An object as stored: its kind, who it is, and its spec and status as free JSON."""

    apiVersion: str
    kind: str
    metadata: RawMeta
    spec: dict[str, Any]
    status: dict[str, Any]
    data: dict[str, str]
    type: str


class RawCondition(TypedDict, total=False):
    """One entry of ``status.conditions``, as :class:`~agentpool.api.base.Condition` is written
    (``metav1.Condition``)."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


def raw_body(body: Mapping[str, Any]) -> RawBody:
    """``body`` (kopf's, or a mapping a listing gave) as a :class:`RawBody`: a shallow copy,
    taken as the API server's JSON for what it is."""
    return cast(RawBody, dict(body))


def uid_of(body: Mapping[str, Any]) -> str:
    """The object's uid: an object made again under a name is another object."""
    return str((body.get("metadata") or {}).get("uid") or "")


def raw_items(listed: Mapping[str, Any]) -> list[RawBody]:
    """The items of a listing (a ``...List`` object) as :class:`RawBody` views."""
    return cast(list[RawBody], list(listed.get("items") or []))


class RawObjectReference(TypedDict, total=False):
    """An Event's ``involvedObject``: the object it is about."""

    apiVersion: str
    kind: str
    namespace: str
    name: str
    uid: str
    fieldPath: str


class RawEvent(TypedDict, total=False):
    """A core/v1 Event, read for what it says about an object (a pod's Unhealthy, say)."""

    metadata: RawMeta
    involvedObject: RawObjectReference
    reason: str
    message: str
    type: str
    count: int
    lastTimestamp: str
    eventTime: str


def raw_events(listed: Mapping[str, Any]) -> list[RawEvent]:
    """The items of an EventList as :class:`RawEvent` views."""
    return cast(list[RawEvent], list(listed.get("items") or []))


class RawUserInfo(TypedDict, total=False):
    """``authentication.k8s.io/v1`` UserInfo: who a TokenReview found a token to belong to."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class RawTokenReviewStatus(TypedDict, total=False):
    """A TokenReview's ``status``: whether the token is good, and whose it is."""

    authenticated: bool
    user: RawUserInfo
    audiences: list[str]
    error: str


class RawReviewedUser(TypedDict, total=False):
    """The user fields of a SubjectAccessReview's ``spec``: whom to ask about."""

    user: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class RawAccessReviewStatus(TypedDict, total=False):
    """A SubjectAccessReview's ``status``: whether the user may, and why."""

    allowed: bool
    denied: bool
    reason: str
    evaluationError: str
