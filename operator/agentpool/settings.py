"""The operator's tunables in one object, each with its default and the reason for it.

As kopf keeps its own in ``kopf.OperatorSettings``, agentpool keeps the timings its handlers and
run engines go by in :class:`OperatorSettings`. The operator builds one at start-up and keeps it
in its runtime; a handler reads what it needs from there and hands the values to the pure cores
as arguments, so a test can run the operator with other values and no module constant is patched.
What a user sets per resource is not here: it is in the resource's spec (``agentpool.api``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PoolSettings:
    """How an AgentPool's reconcile loop paces itself and what it remembers."""

    idle_pass_seconds: float = 5.0
    """The longest a pass waits for a trigger before looking again."""
    timed_pass_seconds: float = 1.0
    """While overflow, lifetimes or waiters are in play, a pass runs this often, to honour them
    to the second."""
    quiet_pass_seconds: float = 300.0
    """A steady pool (every agent Ready and free, nothing troubled or pending) has no rule of
    time to honour: a pass looks at it this often, as a safety net, and on every trigger (a pod
    event, a spec change, its first checkout). This is what makes idle pools cost nothing (at
    1,000 pools, a pass every 0.3 s in all), and how late, at most, a deleted token Secret of a
    pool that creates no agent is put back (a pool that creates one puts it back first)."""
    drain_seconds: float = 30.0
    """A deleted pool waits this long for busy agents before its pods go (Kubernetes' default
    termination grace period)."""
    status_interval_seconds: float = 1.0
    """Status writes of one pool are coalesced to at most one per this many seconds."""
    sample_seconds: float = 10.0
    """Demand is sampled for the sizing recommendation this often..."""
    sample_window_seconds: float = 3600.0
    """...over this window: an hour shows a day's peaks without keeping them for ever."""
    secret_check_seconds: float = 3.0
    """How often a pool looks for its token Secret, which a user may delete."""
    crash_backoff_max_seconds: float = 60.0
    """The longest a pool waits before replacing agents that keep failing at start-up (the
    kubelet caps CrashLoopBackOff at five minutes; a pool's agents are cheaper to retry)."""
    unready_memory_seconds: float = 60.0
    """How long an agent that turned unready keeps the pool Degraded after it was replaced, so
    the condition stays long enough for someone to see it."""
    outside_protocol_answers: int = 5
    """Answers outside the agent protocol in a row, across the pool's agents, that mark the pool
    Degraded (OutsideProtocol): one stray page (a proxy's, during a restart) is not a pool that
    speaks something else, five with none in the protocol between are, and a user who sees ten
    items fail finds the pool's condition saying why. 0 turns the judgement off."""
    outside_protocol_memory_seconds: float = 300.0
    """How long the last answer outside the protocol keeps the pool Degraded when no answer in
    the protocol ends it sooner: a pool whose agents were fixed while no item came turns healthy
    again on its own."""
    keep_failed_seconds: float = 600.0
    """How long a failed agent pod is kept after it failed: time to notice and look, then it
    goes."""
    probe_failure_seconds: float = 60.0
    """An agent whose container has run this long without turning Ready makes the pool Degraded
    (ReadinessFailing) with its probe's last error, or twice the pool's measured cold start if
    that is longer, never past progressDeadlineSeconds: a minute lets an ordinary start-up
    answer 503 unremarked, and reports a wrong port nine minutes before the deadline would."""
    probe_events_seconds: float = 15.0
    """While some agent is past that threshold, the pool lists its namespace's Unhealthy Events
    at most this often for the probe's last error; a pool with no such agent lists none."""


@dataclass(frozen=True)
class RecoverySettings:
    """How a restarted operator takes back the agents that were busy before it stopped."""

    silence_seconds: float = 30.0
    """A restored agent that answers nothing for this long is lost."""
    poll_seconds: float = 0.5
    """How often an agent found busy after a restart is asked whether it is done."""
    status_timeout_seconds: float = 2.0
    """How long a restarted loop waits for each agent's ``GET /status``."""
    status_concurrency: int = 256
    """``GET /status`` calls of restarting pools in flight at once, across all pools. All pools
    start together after a restart: 10,000 agents asked at once queued on the agent client's
    connections, where the wait counted against each call's timeout, so agents that answered in
    time were taken for silent, held busy and asked again twice a second."""


@dataclass(frozen=True)
class LeaseSettings:
    """How the AgentLease tasks bind and end."""

    stop_seconds: float = 35.0
    """How long a stopping operator lets its lease tasks end by themselves before it cancels
    them: a few turns of the event loop, or, should a lease expire as the operator stops, the
    end of the agent's reset it has begun (which the agent client bounds at 30 s)."""
    bind_timeout_seconds: float = 30.0
    """How long an agent may take to answer ``POST /bind`` or ``/unbind``: its author's bind or
    unbind (and reset) functions run before it answers. Past it the agent is retired."""
    sweep_seconds: float = 30.0
    """How often the leases held are listed, to release those whose deletion the watch missed
    (a listing after a broken watch names no deleted object): one LIST per namespace."""
    events: bool = True
    """Post an Event on a lease's pool when the lease is bound and when it expires, counted
    per window (``agentpool run --no-lease-events`` turns them off)."""
    event_window_seconds: float = 30.0
    """The first LeaseBound (or LeaseExpired) Event of a pool is written at once; those after
    it are counted and written as one Event per this many seconds (its ``count`` says how
    many), so however many leases bind, their Events cost a pool one write a window."""


@dataclass(frozen=True)
class RunSettings:
    """How a PoolRun's engine waits on its source and its agents, and how often it writes."""

    status_interval_seconds: float = 1.0
    """A run's status writes are batched to at most one per this many seconds: the API server
    never sees a write per item. A source with nothing ready is reported waiting after as long."""
    held_write_gap_seconds: float = 0.1
    """When the re-run limit holds dispatch and nothing is running, the next status write goes
    this long after the last instead of a whole interval, so short items do not idle."""
    cast_poll_seconds: float = 0.2
    """How often the agent of a cast item is asked whether it is done."""
    source_poll_first_seconds: float = 0.1
    """A source that has nothing ready is asked again after this long at first..."""
    source_poll_max_seconds: float = 5.0
    """...doubling up to this: a source that stays empty costs a request every few seconds."""
    source_batch_max: int = 256
    """The most items one request lets a source send (``max``: twice the run's cap less its
    items in flight, up to this), so one answer of a run with a large cap stays a modest body."""
    refused_max_seconds: float = 5.0
    """The longest an item waits for another agent after one refused the operator's token."""
    failure_event_interval_seconds: float = 5.0
    """ItemFailed Events of one run are at most one per this many seconds (the status counts
    every failure)."""


@dataclass(frozen=True)
class GatewaySettings:
    """How the gateway checks its callers and answers them."""

    access_seconds: float = 10.0
    """How long a TokenReview's and a SubjectAccessReview's answers are kept: a steady caller
    costs no API request per call, and a deleted RoleBinding or revoked token takes effect
    within this time (kube-rbac-proxy keeps them as briefly)."""
    access_entries: int = 4096
    """Answers of each kind kept at most, the least recently used dropped first, so a stream
    of callers with fresh tokens cannot grow the operator's memory."""
    body_limit_bytes: int = 3 * 1024 * 1024
    """The largest request body taken (413 past it): the API server's own limit on a request,
    so an item that fits a PoolRun fits a call."""
    event_limit_bytes: int = 16 * 1024 * 1024
    """The largest event of an agent's streamed answer the gateway holds while it reads it on the
    way: a part past it (or a line that never ends) breaks the stream off rather than fill the
    operator's memory, which every pool shares."""
    session_sweep_seconds: float = 1.0
    """How often sessions idle past their pool's ``sessions.idleTimeoutSeconds`` are ended."""
    retry_after_seconds: float = 1.0
    """The ``Retry-After`` of a 429 or 503: a pool that is full now frees an agent within about
    an item's time, and a caller that waits a second does not add to the line."""
    refused_tries: int = 3
    """Agents tried for one call when an agent refuses the pool's token (it was rotated and the
    agent not yet replaced): the next is taken in its place, and the refusing one retired."""
    relay_seconds: float = 30.0
    """How long a call passed on to another replica is tried again while its pool changes
    hands (that replica stopping or gone, the pool not yet taken up by the next): the caller
    waits as it waits in a pool's line, rather than get a 503."""
    drain_seconds: float = 10.0
    """How long a stopping operator's gateway lets the calls it is serving end, taking no new
    ones: calls whose pools this replica gave up are passed on to where they went, and a
    rolling update of the operator cuts none. Within the pod's termination grace period."""
    drain_linger_seconds: float = 2.0
    """How long a stopping gateway keeps its kept-alive connections open at least, answering
    what arrives on them 503 Unavailable, before it closes those left idle: another replica
    that passed calls to this one sends them again where their pools went, rather than lose
    them to a closed socket. Twice the time the others take to see this one's pools placed
    anew (about a second)."""
    peers_seconds: float = 2.0
    """How often a replica with peers reads the kopf peering object to tell whether it acts,
    which its gateway's readiness says: the Service follows a hand-over within about this long
    after kopf's own."""
    publish_seconds: float = 300.0
    """How often each namespace's ``agentpool-gateway`` ConfigMap is checked and mended, should
    someone delete or change it."""
    certificate_seconds: float = 300.0
    """How often the certificate's Secret is read again: one renewed there (by cert-manager, say)
    is served from the next handshake on, and a managed one about to expire is made anew, as the
    API server reloads its own serving certificate."""


@dataclass(frozen=True)
class ReplicaSettings:
    """How replicas that share the pools keep their membership and their pools assigned."""

    lease_seconds: int = 5
    """Each replica's membership Lease lasts this long from its last renewal: a replica that
    crashed gives its pools to the others about this long after its last renewal. Shorter moves
    pools sooner after a crash, and takes them from a replica stalled (a long pause, a slow API
    server) that much sooner."""
    renew_seconds: float = 1.0
    """How often a replica renews its Lease: several times in ``lease_seconds``, so one slow or
    failed renewal does not lapse it."""
    assign_seconds: float = 1.0
    """How often the assigner reads who is live, and places what waits: a replica that joined,
    left or lapsed is seen within about this long."""


@dataclass(frozen=True)
class OperatorSettings:
    """Every tunable of the operator, grouped by the part that goes by it."""

    pools: PoolSettings = field(default_factory=PoolSettings)
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    leases: LeaseSettings = field(default_factory=LeaseSettings)
    runs: RunSettings = field(default_factory=RunSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    replicas: ReplicaSettings = field(default_factory=ReplicaSettings)
