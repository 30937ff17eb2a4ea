"""The AgentPool resource: a pool of warm agent pods, its spec and the status the operator keeps.

The AgentPool resource in types: every field, default and bound, and the CEL rules the API
server enforces on them. The pool core (``agentpool.pool``) plans from ``AgentPoolSpec``; the
operator writes ``AgentPoolStatus``; ``agentpool.api.crds`` renders both into the CRD.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import cronsim
from pydantic import ConfigDict, Field, field_validator, model_validator

from agentpool.api.base import (
    CONDITION_LIST,
    ApiModel,
    CelRule,
    Condition,
    IntOrPercent,
    JsonObject,
    cel,
    name_rule,
)
from agentpool.wire.protocol import DEFAULT_PORT

Strategy = Literal["LIFO", "FIFO"]
#: What the pool's agents serve: Agentpool, the agent protocol (``agentpool.wire.protocol``), or
#: HTTP, any HTTP/1.1 server taken as it is.
Protocol = Literal["Agentpool", "HTTP"]
PoolState = Literal["Ready", "Overflow", "Full", "Starting", "ScaledToZero"]

DEFAULT_HEALTH_PATH = "/healthz"
#: The most items one agent may serve at once: past this, more pods serve better than more slots.
MAX_SLOTS = 256

#: A pool's name is the value of its pods' ``agentpool.dev/pool`` and ``app.kubernetes.io/name``
#: labels (and of its token Secret's), and prefixes their names, so it must be a label value.
ZERO_ROLL_MESSAGE = (
    "maxSurge and maxUnavailable are both 0, so a rollout could neither add a new agent nor"
    " retire an old one: set maxSurge or maxUnavailable above 0"
)

SESSIONS_NEED_HTTP_MESSAGE = (
    "sessions pin an HTTP pool's requests to one agent: set protocol to HTTP, or leave sessions"
    " out (an Agentpool pool's sessions are AgentLeases)"
)

RESET_ON_HTTP_MESSAGE = (
    "resetBetweenItems calls the agent's POST /reset, which an HTTP pool's agent does not serve:"
    " turn resetBetweenItems off, or set protocol to Agentpool"
)

POOL_NAME_RULE = name_rule(
    "an AgentPool", "on its pods", "agentpool.dev/pool, app.kubernetes.io/name"
)


class HttpGetAction(ApiModel):
    """An HTTP GET against the agent; any status from 200 to 399 counts as success."""

    path: str = Field(default=DEFAULT_HEALTH_PATH, pattern=r"^/")
    """The path to request."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """The port to request; defaults to the pool's port."""
    scheme: Literal["HTTP", "HTTPS"] = "HTTP"
    """HTTP or HTTPS."""


class TcpSocketAction(ApiModel):
    """A TCP connection to the agent; success when it is accepted."""

    port: int | None = Field(default=None, ge=1, le=65535)
    """The port to connect to; defaults to the pool's port."""


class ExecAction(ApiModel):
    """A command run inside the agent's container; success when it exits 0."""

    command: list[str] = Field(min_length=1)
    """The command and its arguments, run without a shell."""


class Probe(ApiModel):
    """How the pool tells that an agent is ready for work, as a Kubernetes readiness probe."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            CelRule(
                rule="[has(self.httpGet), has(self.tcpSocket), has(self.exec)]"
                ".filter(x, x).size() <= 1",
                message="a probe takes one of httpGet, tcpSocket or exec: remove the others",
            )
        )
    )

    http_get: HttpGetAction | None = None
    """Probe with an HTTP GET. When no handler is given, GET /healthz on the pool's port (on an
    HTTP pool, a TCP connection to it)."""
    tcp_socket: TcpSocketAction | None = None
    """Probe by opening a TCP connection."""
    exec: ExecAction | None = None
    """Probe by running a command in the container."""
    initial_delay_seconds: int | None = Field(default=None, ge=0)
    """Seconds after the container starts before the first probe."""
    period_seconds: int | None = Field(default=None, ge=1)
    """Seconds between probes; 1 when unset, so a new agent joins the pool as soon as it answers
    (Kubernetes' own default is 10)."""
    timeout_seconds: int | None = Field(default=None, ge=1)
    """Seconds after which one probe counts as failed (Kubernetes default 1)."""
    success_threshold: int | None = Field(default=None, ge=1)
    """Consecutive successes that make the agent Ready (Kubernetes default 1)."""
    failure_threshold: int | None = Field(default=None, ge=1)
    """Consecutive failures that make the agent unready (Kubernetes default 3)."""


PROBE_TIMINGS = {
    "periodSeconds": 1,
    "timeoutSeconds": 1,
    "failureThreshold": 3,
    "successThreshold": 1,
}
"""The timings an agent pod's readiness probe gets where the spec's probe sets none, as the
Probe fields describe them."""


#: The shape of a five-field cron expression (minute hour day-of-month month day-of-week); the
#: CRD checks it, the model's validator checks each field's values.
CRON_PATTERN = r"^\S+(\s+\S+){4}$"


def _cron_field(value: str, *extra: str) -> str:
    """A regular expression (RE2, as CEL's matches reads it) of one cron field: a list of *, a
    value or a range of values, each with an optional step, or one of ``extra``."""
    item = rf"(?:\*|{value}(?:-{value})?)(?:/[0-9]+)?"
    one = "|".join((item, *extra))
    return rf"(?:{one})(?:,(?:{one}))*"


_MONTHS = "(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
_DAYS = "(?i:sun|mon|tue|wed|thu|fri|sat)"
CRON_FIELDS = r"\s+".join(
    (
        _cron_field("[0-5]?[0-9]"),
        _cron_field("(?:[01]?[0-9]|2[0-3])"),
        _cron_field("(?:0?[1-9]|[12][0-9]|3[01])", "L", "LW"),
        _cron_field(f"(?:0?[1-9]|1[0-2]|{_MONTHS})"),
        _cron_field(f"(?:[0-7]|{_DAYS})", "[0-7]L", f"(?:[0-7]|{_DAYS})#[1-5]"),
    )
)
"""Five cron fields each within its range: what the API server checks of a schedule's start
and end at apply (CEL cannot read cron; a regular expression can bound each field). What it
lets through and the operator's cron reader still refuses (a range that runs backwards, a step
of 0) marks the pool InvalidSpec."""
CRON_MESSAGE = (
    "must be a cron expression of five fields: minute 0-59, hour 0-23, day of month 1-31 or L,"
    " month 1-12 or JAN-DEC, day of week 0-7 or SUN-SAT; each *, a value, a range or a list,"
    " with an optional /step, such as '0 9 * * 1-5'"
)
#: Where cron expressions are tried out when they are validated; any instant would do.
CRON_PROBE = datetime(2000, 1, 1, tzinfo=UTC)


def check_cron(expression: str) -> str:
    """``expression`` if it is a valid five-field cron expression; else ``ValueError`` saying
    which field is wrong and what a valid one looks like."""
    if len(expression.split()) != 5:
        raise ValueError(
            f"{expression!r} is not a cron expression of five fields (minute hour day-of-month"
            " month day-of-week), such as '0 9 * * 1-5'"
        )
    try:
        cronsim.CronSim(expression, CRON_PROBE)
    except cronsim.CronSimError as error:
        raise ValueError(
            f"{expression!r} is not a valid cron expression: {error}; write five fields"
            " (minute hour day-of-month month day-of-week), such as '0 9 * * 1-5'"
        ) from None
    return expression


def check_time_zone(name: str) -> str:
    """``name`` if it is an IANA time zone this operator knows; else ``ValueError``."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not an IANA time zone: write one such as 'UTC' or 'Europe/Berlin'"
        ) from None
    return name


class WarmSchedule(ApiModel):
    """A recurring window in which the pool keeps more agents warm: from each time start
    matches until durationSeconds later, or until end next matches, read in timeZone."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            CelRule(
                rule="has(self.end) != has(self.durationSeconds)",
                message="a schedule closes either at end or after durationSeconds: set exactly"
                " one of them",
                field_path=".durationSeconds",
            ),
            CelRule(
                rule="has(self.minSize) || has(self.minIdle)",
                message="a schedule raises minSize, minIdle or both: set at least one",
                field_path=".minSize",
                reason="FieldValueRequired",
            ),
            CelRule(
                rule=f"self.start.matches(r'^{CRON_FIELDS}$')",
                message=f"start {CRON_MESSAGE}",
                field_path=".start",
            ),
            CelRule(
                rule=f"!has(self.end) || self.end.matches(r'^{CRON_FIELDS}$')",
                message=f"end {CRON_MESSAGE}",
                field_path=".end",
            ),
            # Reading a time in the zone is CEL's one check of a zone name: a name the API
            # server's time zone database does not hold fails the rule with "unknown time zone".
            CelRule(
                rule="!has(self.timeZone) ||"
                " timestamp('2000-01-01T00:00:00Z').getHours(self.timeZone) >= 0",
                message="timeZone must be an IANA time zone name such as UTC or Europe/Berlin",
                field_path=".timeZone",
            ),
        )
    )

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """The window's name, unique in the pool, shown in status.openSchedules while it is open."""
    start: str = Field(max_length=256, json_schema_extra={"pattern": CRON_PATTERN})
    """When the window opens: a five-field cron expression (minute hour day-of-month month
    day-of-week, as in a CronJob), read in timeZone."""
    end: str | None = Field(
        default=None, max_length=256, json_schema_extra={"pattern": CRON_PATTERN}
    )
    """When the window closes: a five-field cron expression, read in timeZone; the first time
    it matches after the window opened. Set this or durationSeconds."""
    duration_seconds: int | None = Field(default=None, ge=60)
    """How long the window stays open after each start, in seconds (at least 60). Set this or
    end."""
    time_zone: str = Field(default="UTC", min_length=1, max_length=64)
    """The IANA time zone start and end are read in, such as Europe/Berlin; default UTC.
    Across a daylight saving change the window follows the wall clock."""
    min_size: int | None = Field(default=None, ge=0)
    """minSize while the window is open: the pool keeps the largest of spec.minSize and every
    open window's, and raises its ceiling to it when maxSize is lower."""
    min_idle: int | None = Field(default=None, ge=0)
    """minIdle while the window is open: the pool keeps the largest of spec.minIdle and every
    open window's."""

    @field_validator("start", "end")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        return None if value is None else check_cron(value)

    @field_validator("time_zone")
    @classmethod
    def _valid_time_zone(cls, value: str) -> str:
        return check_time_zone(value)


HeadroomMode = Literal["Advise", "Auto"]


class Sessions(ApiModel):
    """Requests of one session go to one agent, for agents that keep a session's state (an MCP
    server's, say) and name it in a header of their own."""

    header: str = Field(min_length=1, max_length=128, pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    """The header that carries a session's id, as the agent names it (Mcp-Session-Id for an MCP
    server): an answer that carries a new id pins the agent that sent it to that id, one of its
    slots held for the session; a request with the id goes to that agent past the pool's line.
    A DELETE with the id, the idle timeout or the agent's loss ends the session, and a request
    with an unknown or ended id is answered 404, as an MCP client expects before it starts
    anew."""
    idle_timeout_seconds: int = Field(default=600, ge=1, le=86400)
    """Seconds a session may go without a request before it ends and its slot goes back."""


class Headroom(ApiModel):
    """How minIdle follows the pool's own sizing advice: as a HorizontalPodAutoscaler follows
    its metric, with a tolerance, stabilization windows and a rate limit, so it does not flap."""

    mode: HeadroomMode = "Advise"
    """Advise (the default) only reports the advice in status.recommendation; Auto keeps
    minIdle at the observed gap between peak and median demand (recommendation.maxSize -
    recommendation.minSize), never below spec.minIdle or an open schedule's, never above
    maxSize - minSize. Each change is a Normal Event HeadroomChanged with its figures."""
    max_step_per_minute: int = Field(default=1, ge=1)
    """The most minIdle may change, up or down together, in any 60 seconds."""
    tolerance: int = Field(default=0, ge=0)
    """Advice within this many agents of the current minIdle changes nothing."""
    scale_up_stabilization_seconds: int = Field(default=0, ge=0, le=3600)
    """minIdle rises only to the lowest advice of this many past seconds (as an HPA's
    scaleUp stabilizationWindowSeconds): 0 follows a rise at once."""
    scale_down_stabilization_seconds: int = Field(default=300, ge=0, le=3600)
    """minIdle falls only to the highest advice of this many past seconds (as an HPA's
    scaleDown stabilizationWindowSeconds, default 300): a lull does not give up warm agents."""


class AgentPoolSpec(ApiModel):
    """The desired pool: which agent to run, how many to keep warm, and how to hand them out."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            CelRule(
                rule="!has(self.maxSize) || self.minSize <= self.maxSize",
                message="maxSize must be at least minSize: raise maxSize or lower minSize",
                field_path=".maxSize",
            ),
            CelRule(
                rule="has(self.image) || has(self.template)",
                message="set image to the agent image, or give a template whose container "
                "says what to run",
                field_path=".image",
                reason="FieldValueRequired",
            ),
            CelRule(
                rule="!has(self.resetBetweenItems) || !self.resetBetweenItems"
                " || !has(self.slots) || self.slots == 1",
                message="resetBetweenItems resets the whole agent, so it needs slots 1: set slots"
                " to 1, or turn resetBetweenItems off",
                field_path=".slots",
            ),
            CelRule(
                rule="!has(self.sessions) || (has(self.protocol) && self.protocol == 'HTTP')",
                message=SESSIONS_NEED_HTTP_MESSAGE,
                field_path=".sessions",
                reason="FieldValueForbidden",
            ),
            CelRule(
                rule="!has(self.protocol) || self.protocol != 'HTTP'"
                " || !has(self.resetBetweenItems) || !self.resetBetweenItems",
                message=RESET_ON_HTTP_MESSAGE,
                field_path=".resetBetweenItems",
                reason="FieldValueForbidden",
            ),
            CelRule(
                rule="!has(self.maxSurge) || !has(self.maxUnavailable)"
                " || !string(self.maxSurge).matches('^0+%?$')"
                " || !string(self.maxUnavailable).matches('^0+%?$')",
                message=ZERO_ROLL_MESSAGE,
                field_path=".maxUnavailable",
            ),
        )
    )

    image: str | None = Field(default=None, min_length=1)
    """The agent image; it fills the first container of the pod template."""
    template: JsonObject | None = None
    """A full PodTemplateSpec for everything else: env, resources, volumes, nodeSelector,
    securityContext, command. The first container runs the agent."""
    protocol: Protocol = "Agentpool"
    """What the agents serve. Agentpool (the default): the agent protocol (GET /healthz, POST
    /invoke with its envelope, GET /status, POST /reset, /bind and /unbind, the pool's token on
    each request). HTTP: any HTTP/1.1 server on port, taken as it is; the operator only probes
    it for readiness and sends it nothing else, gives it no pool token (AGENTPOOL_TOKEN), and
    counts an agent idle from the operator's own checkouts only. Fields that need the agent
    protocol say so, and resetBetweenItems is refused on an HTTP pool."""
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    """The port each agent serves on (the agent protocol, or plain HTTP on an HTTP pool),
    passed to it as AGENT_PORT."""
    min_size: int = Field(default=1, ge=0)
    """Agents kept warm at all times. The scale subresource sets this field."""
    max_size: int | None = Field(default=None, ge=0)
    """The most agents the pool may run; maxSize - minSize is the overflow. Defaults to
    minSize (no overflow)."""
    strategy: Strategy = "LIFO"
    """Which idle agent a checkout gets: LIFO, the most recently returned (the rest stay idle and
    overflow shrinks), or FIFO, the longest idle (spreads the load)."""
    readiness_probe: Probe | None = None
    """How an agent proves it is ready before it joins the pool, when the template's container
    gives no probe; defaults to HTTP GET /healthz on port, and on an HTTP pool (whose server
    may have no /healthz) to a TCP connection to port."""
    idle_timeout_seconds: int = Field(default=60, ge=0)
    """An idle overflow agent is removed after this many seconds."""
    max_uses: int = Field(default=0, ge=0)
    """Items an agent serves before it is retired and replaced; 0 means unlimited. A restarted
    operator reads each agent's count from its GET /status; an HTTP pool's agents, never
    asked, count again from 0."""
    max_lifetime_seconds: int = Field(default=0, ge=0)
    """Age in seconds at which an agent is retired and replaced, never while it holds work;
    0 means unlimited."""
    max_surge: IntOrPercent = "25%"
    """During a rollout (a changed image or template), the most agent pods that may run above
    the desired number, as a count or a percentage of the desired agents (rounded up). New
    agents start first within this bound, even past maxSize. Defaults to 25%, as a
    Deployment's."""
    max_unavailable: IntOrPercent = "25%"
    """During a rollout, the most of the desired Ready agents that may be missing, as a count or
    a percentage of the desired agents (rounded down): an outdated idle agent is retired only
    while the Ready agents stay at least the desired number minus this. Busy agents are never
    interrupted. Defaults to 25%, as a Deployment's; maxSurge and maxUnavailable may not both
    be 0."""
    min_idle: int = Field(default=0, ge=0)
    """Idle agents kept on top of busy ones, within maxSize, so a burst finds warm agents."""
    max_unready: int = Field(default=10, ge=1)
    """The most agent pods that may be not Ready at once, counted as a watch of the pool's pods
    sees them: pods starting, failed pods kept for a look, and pods on their way out (a retired
    agent's pod turns not Ready before it goes), each until its grace period and 30 s more have
    passed (one still Terminating then is on a lost node). The pool creates pods, and a rollout
    retires a Ready agent, only within this count, so an agent that never turns Ready (or a
    node that cannot run it) holds at most this many pods, however large the pool. Kept failed
    pods give way, oldest first, when they are what keeps the pool from starting the agents it
    wants or a rollout from retiring its next outdated agent. Pods removed for other reasons (a
    scale-down, a recycled or failed agent) are not held back for it, but no pod is created
    until the count is back within it. The default 10 starts most pools and bursts at once;
    raise it for large pools that must fill faster than one cold start per 10 agents."""
    checkout_timeout_seconds: int = Field(default=30, ge=1)
    """How long a checkout waits for an agent before it fails; runs and leases may override."""
    call_timeout_seconds: int = Field(default=300, ge=1)
    """How long one call to an agent may take; runs may override. An agent whose call timed out
    is retired."""
    slots: int = Field(default=1, ge=1, le=MAX_SLOTS)
    """Items one agent serves at once (like Knative's containerConcurrency); a PoolRun's cap is
    the items of one run in flight. Each agent is handed out while it has a free slot and learns
    the count as AGENTPOOL_SLOTS. 1 (the default) serves one item at a time; a lease always takes
    a whole agent."""
    reset_between_items: bool = False
    """Call the agent's POST /reset after every item; an agent whose reset fails is retired.
    Needs slots 1 and the agent protocol (refused on an HTTP pool)."""
    sessions: Sessions | None = None
    """Pin each session's requests to one agent (HTTP pools only): the header that names a
    session and how long an idle one lasts. Left out, every request is a checkout of its own."""
    max_waiters: int = Field(default=1000, ge=0)
    """The most checkouts that may wait for an agent of this pool at once, across runs, leases
    and gateway calls; a gateway call that would wait past it is refused at once (429
    TooManyWaiters, with Retry-After) rather than held. Runs and leases are bounded by their own
    cap and count, so they still queue."""
    quarantine_after_failures: int = Field(default=3, ge=0)
    """An agent that fails this many items in a row, while the pool's other agents serve items
    successfully, is retired (replacements back off exponentially); items that fail on every
    agent retire none. 0 never retires for failures."""
    progress_deadline_seconds: int = Field(default=600, ge=1)
    """Seconds a rollout may go without progress, and an agent pod may take from its creation to
    Ready, before the pool says so (as a Deployment's progressDeadlineSeconds): a stalled rollout
    turns Progressing False with reason ProgressDeadlineExceeded, and agents not Ready past it make
    the pool Degraded with reason AgentsNotReady, naming the pods, how many and for how long."""
    headroom: Headroom = Field(default_factory=Headroom)
    """Whether minIdle follows the pool's own sizing advice (Auto) or the advice is only
    reported (Advise, the default), and how fast it may move."""
    schedules: list[WarmSchedule] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Windows in which the pool keeps more agents warm, such as business hours: while one is
    open, minSize and minIdle are the largest of the spec's and of every open window's
    (status.effectiveMinSize, status.effectiveMinIdle, status.openSchedules)."""

    @field_validator("schedules")
    @classmethod
    def _unique_schedules(cls, value: list[WarmSchedule]) -> list[WarmSchedule]:
        names = [schedule.name for schedule in value]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(
                f"schedule names must be unique; {', '.join(repeated)} is used more than once:"
                " rename one"
            )
        return value

    @model_validator(mode="after")
    def _refuse_zero_roll(self) -> AgentPoolSpec:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise ValueError(ZERO_ROLL_MESSAGE)
        return self

    @model_validator(mode="after")
    def _refuse_sessions_off_http(self) -> AgentPoolSpec:
        if self.sessions is not None and self.protocol != "HTTP":
            raise ValueError(SESSIONS_NEED_HTTP_MESSAGE)
        return self

    @model_validator(mode="after")
    def _refuse_reset_on_http(self) -> AgentPoolSpec:
        if self.protocol == "HTTP" and self.reset_between_items:
            raise ValueError(RESET_ON_HTTP_MESSAGE)
        return self

    @property
    def speaks_protocol(self) -> bool:
        """Whether the agents serve the agent protocol, so the operator may ask them GET
        /status, POST /reset, /bind, /unbind and /invoke; False on an HTTP pool, whose agents
        the operator only probes."""
        return self.protocol == "Agentpool"

    @property
    def effective_max_size(self) -> int:
        """The ceiling in force: maxSize, or minSize when maxSize is not set."""
        return self.min_size if self.max_size is None else self.max_size

    def effective_readiness_probe(self) -> Probe:
        """The readiness probe agent pods get: the spec's, with GET /healthz (a TCP connection
        on an HTTP pool, whose server may serve no /healthz) when it names no handler, and the
        path and the pool's port filled in where its handler names none."""
        probe = self.readiness_probe or Probe()
        if probe.http_get is None and probe.tcp_socket is None and probe.exec is None:
            default = (
                {"http_get": HttpGetAction()}
                if self.speaks_protocol
                else {"tcp_socket": TcpSocketAction()}
            )
            probe = probe.model_copy(update=default)
        if probe.http_get is not None:
            http_get = probe.http_get.model_copy(
                update={"path": probe.http_get.path, "port": probe.http_get.port or self.port}
            )
            probe = probe.model_copy(update={"http_get": http_get})
        if probe.tcp_socket is not None:
            tcp_socket = probe.tcp_socket.model_copy(
                update={"port": probe.tcp_socket.port or self.port}
            )
            probe = probe.model_copy(update={"tcp_socket": tcp_socket})
        return probe


def _is_zero(value: int | str) -> bool:
    return value == 0 or (isinstance(value, str) and int(value.removesuffix("%")) == 0)


POOL_DEFAULTS = AgentPoolSpec()
"""A pool spec that sets nothing: each field at its default. Values resolved from a spec outside
the model (the pool policy, a run's timeouts) read their defaults from here rather than restating
them."""


class Recommendation(ApiModel):
    """Pool sizes suggested by the demand the pool has observed."""

    min_size: int = Field(ge=0)
    """A minSize that would have served the observed steady demand warm."""
    max_size: int = Field(ge=0)
    """A maxSize that would have covered the observed peaks without waiting."""


class AgentPoolStatus(ApiModel):
    """The pool as the operator last observed it."""

    replicas: int = Field(default=0, ge=0)
    """Agent pods in the pool (the scale subresource reads this): not those being deleted, nor
    the failed ones kept a while for kubectl logs and describe."""
    ready_replicas: int = Field(default=0, ge=0)
    """Agent pods that are Ready."""
    updated_replicas: int = Field(default=0, ge=0)
    """Agent pods on the pool's current template (image, template, port, probe): those a
    rollout has replaced or that need no replacing."""
    available: int = Field(default=0, ge=0)
    """Agents that are Ready with a free slot (idle, with slots 1): what a checkout can have at
    once."""
    busy: int = Field(default=0, ge=0)
    """Agents holding work (an item in at least one slot, or a lease)."""
    slots: int = Field(default=0, ge=0)
    """Slots of the Ready agents: items they can serve at once (spec.slots each)."""
    busy_slots: int = Field(default=0, ge=0)
    """Slots holding an item now (a leased agent holds all of its slots)."""
    overflow: int = Field(default=0, ge=0)
    """Agent pods above minSize, busy or idle (an idle one goes after idleTimeoutSeconds)."""
    max_size: int | None = Field(default=None, ge=0)
    """The ceiling in force: spec.maxSize, or minSize when maxSize is not set (the MAX
    column); an open schedule's minSize above it raises it."""
    waiting: int = Field(default=0, ge=0)
    """Checkouts queued for an agent."""
    state: PoolState | None = None
    """What a checkout finds now: Ready (an agent is idle), Overflow (every agent busy; overflow
    agents beyond minSize serve more), Full (every agent busy and the pool at maxSize, or allowed
    no overflow: checkouts wait), Starting (no agent Ready yet) or ScaledToZero (no agent runs
    and none is wanted: minSize 0 and nobody waiting, or maxSize 0)."""
    selector: str | None = None
    """The label selector of the pool's pods, for the scale subresource and autoscalers."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation this status reflects."""
    recommendation: Recommendation | None = None
    """minSize and maxSize suggested by the demand observed so far."""
    cold_start_seconds: float | None = Field(default=None, ge=0)
    """The measured cold start of an agent: seconds from pod creation to Ready, recent median."""
    effective_min_size: int | None = Field(default=None, ge=0)
    """The minSize in force now: spec.minSize, or more while a schedule is open."""
    effective_min_idle: int | None = Field(default=None, ge=0)
    """The minIdle in force now: spec.minIdle, or more while a schedule is open."""
    open_schedules: str | None = None
    """The names of the schedules open now, comma-separated (the SCHEDULES column); unset when
    none is open."""
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITION_LIST)
    """Ready (True once minSize agents are Ready; its message says "N of M agents ready, K idle",
    M being the agents the pool keeps or is starting), Degraded (with reasons such as
    ImagePullBackOff, CrashLoopBackOff, ReadinessFailing, Unschedulable) and Progressing (True
    with reason RollingOut while outdated agents are replaced and RolloutComplete once every
    agent is on the current template; False with reason ProgressDeadlineExceeded when a
    rollout made no progress for progressDeadlineSeconds, naming the new agents not Ready)."""
