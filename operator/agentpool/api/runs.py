"""The PoolRun resource: a stream of work items driven through one or more pools.

The PoolRun resource in types: the source (exactly one of inline items, a ConfigMap, an HTTP
source service), the pool or routes, the dispatch and failure policy, and the status the run engine
(``agentpool.runs``) records durably. ``agentpool.api.crds`` renders both into the CRD.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, TypedDict, cast

from pydantic import ConfigDict, Field, field_validator, model_validator

from agentpool.api.base import (
    CONDITION_LIST,
    AnyJson,
    ApiModel,
    CelRule,
    Condition,
    KeyRef,
    NameRef,
    cel,
    name_rule,
)
from agentpool.api.raw import RawCondition

RunMode = Literal["Call", "Cast"]
RequestMethod = Literal["POST", "PUT", "PATCH", "DELETE", "GET"]
FailurePolicy = Literal["Fail", "Report"]
RunPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended"]
RunResult = Literal["Drained", "Deadlocked"]

#: A run's name is the ``agentpool.dev/run`` label value of its result ConfigMaps and prefixes
#: their names (``<run>-results-<n>``), so it must be a label value, as a Job's name must.
RUN_NAME_RULE = name_rule("a PoolRun", "on its result ConfigMaps", "agentpool.dev/run")

MAX_INLINE_ITEMS = 10_000
"""The most items ``source.items`` may hold. Past it an inline run nears the API server's object
limit (about 1.5 MiB in etcd), which refuses it with an error that does not say why, so the CRD
refuses it first and names the sources meant for long runs."""


class HttpSource(ApiModel):
    """A source service that hands out items one at a time.

    ``POST {url}`` with ``{"active": [ids]}`` answers ``{"item": ...}``, ``{"item": null}`` for
    "nothing ready yet", or ``{"done": true}``.
    """

    url: str = Field(min_length=1, pattern=r"^https?://")
    """The source service's URL, http:// or https://."""


def _fixed_source(field: str) -> CelRule:
    # Only the typed sources can be compared here: inline items are out of CEL's view, so the
    # operator pins them by a digest in status.sourceDigest and fails a run whose items change.
    return CelRule(
        rule=f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})",
        message="spec.source cannot change once the run exists: create a new PoolRun instead",
        field_path=f".{field}",
        reason="FieldValueForbidden",
    )


class Source(ApiModel):
    """Where the items come from: exactly one of items, configMapRef or http."""

    # Inline items are free JSON, which CEL cannot see (the API server leaves fields without a
    # schema type out of CEL's view, and refuses a rule that names one), so "exactly one" is
    # told by counting the fields set; the rule gives the clearer message where it can.
    model_config = ConfigDict(
        json_schema_extra={
            **cel(
                CelRule(
                    rule="!(has(self.configMapRef) && has(self.http))",
                    message="set exactly one of source.items, source.configMapRef or source.http",
                ),
                *(_fixed_source(field) for field in ("configMapRef", "http")),
            ),
            "minProperties": 1,
            "maxProperties": 1,
        }
    )

    # A bound CEL cannot carry: free JSON is out of CEL's view, so the API server's own "Too
    # many" refuses a longer list, and this description (kubectl explain) says where to go.
    items: list[AnyJson] | None = Field(default=None, max_length=MAX_INLINE_ITEMS)
    """The items themselves, an inline JSON array of at most 10,000 items; put more in a
    ConfigMap (configMapRef) or serve them over HTTP (http)."""
    config_map_ref: KeyRef | None = None
    """A ConfigMap key holding the items as a JSON array or as JSON Lines."""
    http: HttpSource | None = None
    """A source service polled for items while the run is active."""


class Routes(ApiModel):
    """Send each item to the pool named by the value of one of its fields."""

    field: str = Field(min_length=1)
    """The item field whose value picks the pool, for example role."""
    pools: dict[str, str] = Field(min_length=1)
    """From that field's value to the name of an AgentPool in this namespace. An item whose
    value has no entry fails with reason NoRoute."""


#: Headers a run may not set on its requests: those of one connection (RFC 9110 7.6.1, and the
#: older Keep-Alive and Proxy-Connection), Content-Length (the body's, which the operator writes),
#: and Authorization and Host, which are the operator's to give or to leave out. Compared without
#: regard to case.
REFUSED_HEADERS = (
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "authorization",
    "host",
)
REFUSED_HEADERS_MESSAGE = (
    "request.headers may not set a connection's own headers (Connection, Keep-Alive, TE, "
    "Trailer, Transfer-Encoding, Upgrade, Proxy-*), Content-Length, Authorization or Host: "
    "remove them"
)
#: Header names are tokens (RFC 9110 5.6.2).
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
MAX_HEADERS = 32


def _refused_header_spellings() -> list[str]:
    """The refused headers as they are written: lower case, Title-Case and upper case. CEL's
    lowerAscii is not in every validator the CRD meets, and a regular expression over a map key
    of unknown length costs the API server too much to admit the rule; the operator's own parse
    refuses every other spelling (:meth:`RunRequest._refuse_headers`)."""
    spellings: list[str] = []
    for name in REFUSED_HEADERS:
        title = "-".join(part.capitalize() for part in name.split("-"))
        spellings += dict.fromkeys((name, title, name.upper()))
    return spellings


class RunRequest(ApiModel):
    """How an item becomes a request to an agent of an HTTP pool (spec.protocol HTTP): the item
    is the JSON body (Content-Type application/json), and the answer's body the item's output."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            CelRule(
                rule="!has(self.headers) || self.headers.all(k, !(k in ["
                + ", ".join(f"'{name}'" for name in _refused_header_spellings())
                + "]))",
                message=REFUSED_HEADERS_MESSAGE,
                field_path=".headers",
                reason="FieldValueForbidden",
            ),
        )
    )

    method: RequestMethod = "POST"
    """The request's method."""
    path: str = Field(min_length=1, max_length=2048, pattern=r"^/[^\s]*$")
    """The path (and query) each item is sent to, for example /v1/chat/completions; it starts
    with /."""
    headers: dict[str, Annotated[str, Field(max_length=4096, pattern=r"^[^\r\n]*$")]] | None = (
        Field(default=None, max_length=MAX_HEADERS)
    )
    """Headers sent with every item, by name (at most 32). Connection headers, Content-Length,
    Authorization and Host are refused."""

    @field_validator("headers")
    @classmethod
    def _refuse_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        for name in headers or {}:
            if name.lower() in REFUSED_HEADERS:
                raise ValueError(REFUSED_HEADERS_MESSAGE)
            if re.match(HEADER_NAME_PATTERN, name) is None:
                raise ValueError(f"request.headers: {name!r} is not a header name")
        return headers


#: Spec fields a run reads once, when it starts: changing one later is refused, as a Job refuses
#: changes to its template. (The source, routes and input are read once too; they are not
#: compared here, since a rule over values of any size would be too costly for the API server.)
FIXED_FIELDS = (
    "poolRef",
    "itemId",
    "priority",
    "cap",
    "mode",
    "failures",
    "maxAttempts",
    "backoffSeconds",
    "checkoutTimeoutSeconds",
    "callTimeoutSeconds",
    "request",
)


def _fixed(field: str) -> CelRule:
    return CelRule(
        rule=f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})",
        message=f"spec.{field} cannot change once the run exists (only suspend and "
        "ttlSecondsAfterFinished can): create a new PoolRun instead",
        field_path=f".{field}",
        reason="FieldValueForbidden",
    )


CAST_REQUEST_MESSAGE = (
    "a run with request goes to HTTP pools, whose agents answer each request: they take no "
    "Cast; set mode to Call"
)


class PoolRunSpec(ApiModel):
    """The desired run: which items, through which pool, how many at once, and what to do on
    failure. Once it exists only suspend and ttlSecondsAfterFinished may change; the rest is
    read when the run starts."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            *(_fixed(field) for field in FIXED_FIELDS),
            CelRule(
                rule="has(self.poolRef) || has(self.routes)",
                message="set poolRef.name to the AgentPool to use, or routes to pick a pool "
                "per item",
                field_path=".poolRef",
                reason="FieldValueRequired",
            ),
            CelRule(
                rule="!(has(self.poolRef) && has(self.routes))",
                message="poolRef and routes exclude each other: keep one of them",
                field_path=".routes",
                reason="FieldValueForbidden",
            ),
            CelRule(
                rule="!has(self.request) || !has(self.mode) || self.mode != 'Cast'",
                message=CAST_REQUEST_MESSAGE,
                field_path=".mode",
                reason="FieldValueForbidden",
            ),
        )
    )

    pool_ref: NameRef | None = None
    """The AgentPool, in the same namespace, that runs every item."""
    routes: Routes | None = None
    """Instead of poolRef: a pool per item, chosen by a field of the item."""
    source: Source
    """Where the items come from."""
    item_id: str | None = Field(default=None, min_length=1)
    """The item field that names each item (for example id); default: the item's index. Ids
    must be unique: a duplicate fails that item."""
    priority: int = 0
    """Checkouts of higher priority are served first, first come first served within one."""
    input: AnyJson = None
    """Run-wide input, given to every call beside the item."""
    cap: int = Field(default=1, ge=1)
    """The most items in flight at once."""
    mode: RunMode = "Call"
    """Call waits for each output; Cast hands the item over (the agent answers 202), counts it
    delivered, and gives the item's slot back to the pool once the agent reports that item
    done."""
    failures: FailurePolicy = "Fail"
    """Fail: the run fails if any item fails. Report: failed items are reported and the run
    succeeds once drained."""
    max_attempts: int = Field(default=1, ge=1)
    """Attempts per item before it counts as failed."""
    backoff_seconds: int = Field(default=1, ge=0)
    """Seconds before the first retry of an item; each further retry waits twice as long."""
    checkout_timeout_seconds: int | None = Field(default=None, ge=1)
    """How long a checkout waits for an agent; overrides the pool's."""
    call_timeout_seconds: int | None = Field(default=None, ge=1)
    """How long one call may take; overrides the pool's."""
    request: RunRequest | None = None
    """For a run on HTTP pools (spec.protocol HTTP): how each item becomes a request, whose
    answer is the item's output. Leave it unset for pools of the agent protocol, whose agents
    take items as they are."""
    suspend: bool = False
    """Finish what is in flight and dispatch nothing more until this is false again."""
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    """Delete the run this many seconds after it ends; unset keeps it."""

    @model_validator(mode="after")
    def _refuse_cast_request(self) -> PoolRunSpec:
        if self.request is not None and self.mode == "Cast":
            raise ValueError(CAST_REQUEST_MESSAGE)
        return self


class ItemFailure(ApiModel):
    """Why one item failed, after its last attempt."""

    reason: str
    """One CamelCase word: HandlerError, CallTimeout, AgentLost, NoRoute, DuplicateId, ..."""
    message: str = ""
    """What went wrong, as the agent or the operator said it."""
    attempts: int = Field(default=1, ge=0)
    """Attempts made."""
    agent: str | None = None
    """The agent pod of the last attempt, if it reached one."""

    def to_raw(self) -> RawItemFailure:
        """As it is written: :meth:`to_wire`, typed."""
        return cast(RawItemFailure, self.to_wire())


class ResultRef(ApiModel):
    """A ConfigMap owned by the run that holds results which did not fit in status."""

    name: str = Field(min_length=1)
    """The ConfigMap's name, in the run's namespace."""
    outputs: int = Field(default=0, ge=0)
    """How many item outputs it holds."""
    failures: int = Field(default=0, ge=0)
    """How many item failures it holds."""

    def to_raw(self) -> RawResultRef:
        """As it is written, every field given."""
        return {"name": self.name, "outputs": self.outputs, "failures": self.failures}


class PoolRunStatus(ApiModel):
    """The run as recorded so far: an item recorded here is never run again."""

    phase: RunPhase | None = None
    """Pending, Running, Succeeded, Failed or Suspended."""
    result: RunResult | None = None
    """How dispatch ended, not whether the run succeeded: Drained (no item left to start) or
    Deadlocked (items remain but none can start). A run failed by its items (failures: Fail)
    shows Drained beside phase Failed, with its Failed condition's reason ItemsFailed; phase says
    whether the run succeeded."""
    message: str | None = None
    """The outcome as a sentence, for example "5 of 50 items failed" or the deadlock's cause;
    while the run waits (condition Waiting), what it waits for."""
    total: int = Field(default=0, ge=0)
    """Items seen so far."""
    active: int = Field(default=0, ge=0)
    """Items in flight (checking out an agent, or on one): at most spec.cap. Items waiting for
    a retry are counted in retrying instead."""
    retrying: int = Field(default=0, ge=0)
    """Items whose last attempt failed and that wait for their next: its back-off
    (backoffSeconds), or a free agent. They are not in flight."""
    succeeded: int = Field(default=0, ge=0)
    """Items with an output."""
    failed: int = Field(default=0, ge=0)
    """Items that failed after their last attempt."""
    retries: int = Field(default=0, ge=0)
    """Attempts beyond each item's first, as the agents were given them. An item on attempt n
    counts n - 1, whether it was retried after a failure or resumed after an operator
    restart."""
    start_time: datetime | None = None
    """When the first item was dispatched."""
    completion_time: datetime | None = None
    """When the run ended."""
    items: dict[str, AnyJson] = Field(default_factory=dict)
    """Outputs by item id (those not moved to a ConfigMap in resultRefs). An output holding
    a null always goes to a ConfigMap, where it is kept exactly as the agent answered it."""
    failures: dict[str, ItemFailure] = Field(default_factory=dict)
    """Failed items by item id (those not moved to a ConfigMap in resultRefs)."""
    in_flight: dict[str, int] = Field(default_factory=dict)
    """Items in flight and not yet recorded, by item id, with their attempt (without a state
    directory, also those about to start); after an operator restart they run again with the
    attempt raised."""
    awaiting_retry: dict[str, int] = Field(default_factory=dict)
    """Items waiting for a retry, by item id, with the attempts they have made; after an
    operator restart each runs again with the next attempt."""
    result_refs: list[ResultRef] = Field(default_factory=list)
    """ConfigMaps owned by the run holding further outputs and failures; `agentpool results`
    reads them back."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation this status reflects."""
    source_digest: str | None = None
    """A digest of spec.source and, for a ConfigMap source, of the items it held when the run
    started; a run whose source no longer matches it fails with reason SourceChanged."""
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITION_LIST)
    """Complete, Failed, Suspended, and Waiting: True while items cannot start for something
    the run waits for, named by its reason (PoolNotFound: the pool does not exist yet;
    SourcePending: the source has not answered or has no item ready; ProtocolMismatch: a pool
    serves the other protocol than spec.request asks for) and its message, which says for how
    long."""


class RawItemFailure(TypedDict, total=False):
    """An :class:`ItemFailure` on the wire, as status, result ConfigMaps and journals hold it."""

    reason: str
    message: str
    attempts: int
    agent: str | None


class RawResultRef(TypedDict):
    """A :class:`ResultRef` on the wire: the engine writes every field."""

    name: str
    outputs: int
    failures: int


class RawRunStatus(TypedDict, total=False):
    """A :class:`PoolRunStatus` on the wire, or a JSON merge patch of one: only the keys to
    change, and in the maps a key set to null is removed. The run engine writes its status
    through this (a status is read back into the model); a test keeps its keys those of the
    model."""

    phase: RunPhase
    result: RunResult
    message: str | None
    total: int
    active: int
    retrying: int
    succeeded: int
    failed: int
    retries: int
    startTime: str
    completionTime: str
    items: dict[str, object]
    failures: dict[str, RawItemFailure | None]
    inFlight: dict[str, int | None]
    awaitingRetry: dict[str, int | None]
    resultRefs: list[RawResultRef]
    observedGeneration: int
    sourceDigest: str
    conditions: list[RawCondition]


def raw_run_status(body: Mapping[str, Any]) -> RawRunStatus:
    """A PoolRun's ``status`` as a :class:`RawRunStatus` view (empty when it has none), for
    code that reads a few fields of it as they are stored."""
    return cast(RawRunStatus, body.get("status") or {})
