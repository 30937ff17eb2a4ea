"""The AgentPool resource: a pool of warm agent pods, its spec and the status the operator keeps.

The AgentPool resource in types: every field, default and bound, and the CEL rules the API
server enforces on them. The pool core (``agentpool.pool``) plans from ``AgentPoolSpec``; the
operator writes ``AgentPoolStatus``; ``agentpool.api.crds`` renders both into the CRD.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from agentpool.agent import protocol
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

Strategy = Literal["LIFO", "FIFO"]
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
    """Probe with an HTTP GET. When no handler is given, GET /healthz on the pool's port."""
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
    port: int = Field(default=protocol.DEFAULT_PORT, ge=1, le=65535)
    """The port each agent serves the agent protocol on, passed to it as AGENT_PORT."""
    min_size: int = Field(default=1, ge=0)
    """Agents kept warm at all times. The scale subresource sets this field."""
    max_size: int | None = Field(default=None, ge=0)
    """The most agents the pool may run; maxSize - minSize is the overflow. Defaults to
    minSize (no overflow)."""
    strategy: Strategy = "LIFO"
    """Which idle agent a checkout gets: LIFO, the most recently returned (the rest stay idle and
    overflow shrinks), or FIFO, the longest idle (spreads the load)."""
    readiness_probe: Probe | None = None
    """How an agent proves it is ready before it joins the pool; defaults to HTTP GET /healthz
    on port."""
    idle_timeout_seconds: int = Field(default=60, ge=0)
    """An idle overflow agent is removed after this many seconds."""
    max_uses: int = Field(default=0, ge=0)
    """Items an agent serves before it is retired and replaced; 0 means unlimited."""
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
    """The most agent pods that may exist while not Ready yet: the pool creates more only as
    its starting pods turn Ready, so an agent that never turns Ready (or a node that cannot run
    it) holds at most this many pods, however large the pool. The default 10 starts most pools
    and bursts at once; raise it for large pools that must fill faster than one cold start per
    10 agents."""
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
    Needs slots 1."""
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

    @model_validator(mode="after")
    def _refuse_zero_roll(self) -> AgentPoolSpec:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise ValueError(ZERO_ROLL_MESSAGE)
        return self

    @property
    def effective_max_size(self) -> int:
        """The ceiling in force: maxSize, or minSize when maxSize is not set."""
        return self.min_size if self.max_size is None else self.max_size

    def effective_readiness_probe(self) -> Probe:
        """The readiness probe agent pods get: the spec's, with GET /healthz when it names no
        handler, and the path and the pool's port filled in where its handler names none."""
        probe = self.readiness_probe or Probe()
        if probe.http_get is None and probe.tcp_socket is None and probe.exec is None:
            probe = probe.model_copy(update={"http_get": HttpGetAction()})
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
    """The ceiling in force: spec.maxSize, or minSize when maxSize is not set (the MAX column)."""
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
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=CONDITION_LIST)
    """Ready (True once minSize agents are Ready; its message says "N of M agents ready, K idle",
    M being the agents the pool keeps or is starting), Degraded (with reasons such as
    ImagePullBackOff, CrashLoopBackOff, ReadinessFailing, Unschedulable) and Progressing (True
    with reason RollingOut while outdated agents are replaced and RolloutComplete once every
    agent is on the current template; False with reason ProgressDeadlineExceeded when a
    rollout made no progress for progressDeadlineSeconds, naming the new agents not Ready)."""
