"""Every default the CRDs declare is the value the operator uses when a spec leaves the field out.

``kubectl explain`` shows the CRD's defaults, generated from the models; the operator resolves a
spec into a pool policy, agent pods, a run's settings and a lease's checkout. Each field with a
default in a generated CRD is read back here from what the operator builds out of a minimal spec,
field by field, so a default restated (and changed) anywhere but the model fails this test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from agentpool.api import AgentLeaseSpec, AgentPoolSpec, PoolRunSpec, parse_spec
from agentpool.api.crds import render_crds
from agentpool.api.pools import Sessions
from agentpool.local.apiserver.schema.validation import crd_schema
from agentpool.pool import PoolPolicy
from agentpool.pool.manifests import agent_pod
from agentpool.runs.config import RunConfig, config_from_spec
from agentpool.runs.requests import build_request

#: The least each kind's spec must say; everything else is left to the defaults.
MINIMAL: dict[str, dict[str, Any]] = {
    "AgentPool": {"image": "agent:1"},
    "PoolRun": {"poolRef": {"name": "pool"}, "source": {"items": []}},
    "AgentLease": {"poolRef": {"name": "pool"}},
}
HTTP_RUN = {"request": {"path": "/v1/chat/completions"}}
POOL_OBJECT = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "pool", "namespace": "ns", "uid": "u-1"},
}


def crd_defaults() -> Iterator[tuple[str, str, Any]]:
    """Each (kind, spec path, default) the generated CRDs declare, nested fields included."""

    def walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, Any]]:
        if "default" in schema:
            yield path, schema["default"]
        for name, child in (schema.get("properties") or {}).items():
            yield from walk(child, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            yield from walk(schema["items"], f"{path}[]")

    for text in render_crds().values():
        crd = yaml.safe_load(text)
        spec = crd_schema(crd)["properties"]["spec"]
        for path, default in walk(spec, "spec"):
            yield crd["spec"]["names"]["kind"], path, default


@dataclass(frozen=True)
class Runtime:
    """What the operator builds from the minimal specs, parsed at the edge as its handlers do."""

    pool: AgentPoolSpec
    policy: PoolPolicy
    agent: dict[str, Any]
    run_spec: PoolRunSpec
    run: RunConfig
    lease: AgentLeaseSpec

    @classmethod
    def of_minimal_specs(cls) -> Runtime:
        pool = parse_spec(AgentPoolSpec, MINIMAL["AgentPool"])
        run_spec = parse_spec(PoolRunSpec, MINIMAL["PoolRun"])
        pod = agent_pod(POOL_OBJECT, spec=pool)
        return cls(
            pool=pool,
            policy=PoolPolicy.from_spec(pool),
            agent=pod["spec"]["containers"][0],
            run_spec=run_spec,
            run=config_from_spec("run", run_spec, pools={"pool": pool}),
            lease=parse_spec(AgentLeaseSpec, MINIMAL["AgentLease"]),
        )

    def env(self, name: str) -> str:
        return next(str(e["value"]) for e in self.agent["env"] if e["name"] == name)


#: Where the operator's value of each defaulted field is found. Each gives every value the
#: operator uses for the field; a pool not found yet ("missing") is served with the defaults.
#: Fields the handlers read straight from the parsed model say so.
#: A window that leaves its time zone out.
WINDOW = {"name": "w", "start": "0 9 * * *", "durationSeconds": 3600, "minSize": 2}

USED: dict[tuple[str, str], Callable[[Runtime], list[Any]]] = {
    ("AgentPool", "spec.port"): lambda r: [
        r.policy.port,
        int(r.env("AGENT_PORT")),
        r.agent["ports"][0]["containerPort"],
        r.agent["readinessProbe"]["httpGet"]["port"],
    ],
    ("AgentPool", "spec.minSize"): lambda r: [r.policy.min_size, r.policy.max_size],
    ("AgentPool", "spec.strategy"): lambda r: [r.policy.strategy],
    ("AgentPool", "spec.readinessProbe.httpGet.path"): lambda r: [
        r.agent["readinessProbe"]["httpGet"]["path"]
    ],
    # The pod leaves the scheme out, and Kubernetes probes over HTTP then.
    ("AgentPool", "spec.readinessProbe.httpGet.scheme"): lambda r: [
        r.agent["readinessProbe"]["httpGet"].get("scheme", "HTTP")
    ],
    ("AgentPool", "spec.idleTimeoutSeconds"): lambda r: [r.policy.idle_timeout_seconds],
    ("AgentPool", "spec.maxUses"): lambda r: [r.policy.max_uses],
    ("AgentPool", "spec.maxLifetimeSeconds"): lambda r: [r.policy.max_lifetime_seconds],
    ("AgentPool", "spec.minIdle"): lambda r: [r.policy.min_idle],
    ("AgentPool", "spec.checkoutTimeoutSeconds"): lambda r: [
        r.run.checkout_timeout("pool"),
        r.run.checkout_timeout("missing"),
        r.lease.effective_checkout_timeout(r.pool),
    ],
    ("AgentPool", "spec.callTimeoutSeconds"): lambda r: [
        r.run.call_timeout("pool"),
        r.run.call_timeout("missing"),
    ],
    # The pool handler reads it from the parsed spec.
    ("AgentPool", "spec.resetBetweenItems"): lambda r: [r.pool.reset_between_items],
    # The handlers read it from the parsed spec, as the pool's loop last read it.
    ("AgentPool", "spec.protocol"): lambda r: [r.pool.protocol],
    # The gateway reads it from the pool's parsed spec, as its loop last read it.
    ("AgentPool", "spec.maxWaiters"): lambda r: [r.pool.max_waiters],
    # The gateway reads it from the parsed spec of a pool that names sessions.
    ("AgentPool", "spec.sessions.idleTimeoutSeconds"): lambda r: [
        Sessions.model_validate({"header": "Mcp-Session-Id"}).idle_timeout_seconds
    ],
    ("AgentPool", "spec.quarantineAfterFailures"): lambda r: [r.policy.quarantine_after_failures],
    ("AgentPool", "spec.slots"): lambda r: [r.policy.slots, int(r.env("AGENTPOOL_SLOTS"))],
    ("AgentPool", "spec.maxUnready"): lambda r: [r.policy.max_unready],
    ("AgentPool", "spec.maxSurge"): lambda r: [r.policy.max_surge],
    ("AgentPool", "spec.maxUnavailable"): lambda r: [r.policy.max_unavailable],
    ("AgentPool", "spec.progressDeadlineSeconds"): lambda r: [
        int(r.policy.progress_deadline_seconds)
    ],
    # The pool handler hands the parsed spec's headroom to the headroom decision.
    ("AgentPool", "spec.headroom.mode"): lambda r: [r.pool.headroom.mode],
    ("AgentPool", "spec.headroom.maxStepPerMinute"): lambda r: [
        r.pool.headroom.max_step_per_minute
    ],
    ("AgentPool", "spec.headroom.tolerance"): lambda r: [r.pool.headroom.tolerance],
    ("AgentPool", "spec.headroom.scaleUpStabilizationSeconds"): lambda r: [
        r.pool.headroom.scale_up_stabilization_seconds
    ],
    ("AgentPool", "spec.headroom.scaleDownStabilizationSeconds"): lambda r: [
        r.pool.headroom.scale_down_stabilization_seconds
    ],
    # The schedules read each window's zone from the parsed spec.
    ("AgentPool", "spec.schedules[].timeZone"): lambda r: [
        parse_spec(AgentPoolSpec, {"schedules": [WINDOW]}).schedules[0].time_zone
    ],
    ("PoolRun", "spec.priority"): lambda r: [r.run.spec.priority],
    ("PoolRun", "spec.cap"): lambda r: [r.run.spec.cap],
    ("PoolRun", "spec.mode"): lambda r: [r.run.spec.mode],
    ("PoolRun", "spec.failures"): lambda r: [r.run.spec.failures],
    ("PoolRun", "spec.maxAttempts"): lambda r: [r.run.spec.max_attempts],
    ("PoolRun", "spec.backoffSeconds"): lambda r: [r.run.spec.backoff_seconds],
    # A run on HTTP pools sends each item with the method of its parsed spec.request.
    ("PoolRun", "spec.request.method"): lambda r: [
        build_request(
            parse_spec(PoolRunSpec, {**MINIMAL["PoolRun"], **HTTP_RUN}).request, {}
        ).method
    ],
    # The run handler hands the parsed spec's suspend to the engine.
    ("PoolRun", "spec.suspend"): lambda r: [r.run_spec.suspend],
    # The lease handler reads these from the parsed spec.
    ("AgentLease", "spec.ttlSeconds"): lambda r: [r.lease.ttl_seconds],
    ("AgentLease", "spec.wait"): lambda r: [r.lease.wait],
    ("AgentLease", "spec.priority"): lambda r: [r.lease.priority],
}

DEFAULTS = sorted(crd_defaults(), key=lambda entry: (entry[0], entry[1]))


def test_every_crd_default_is_accounted_for() -> None:
    """Each field the CRDs default has its runtime value read here, and no other: a new default
    in a model needs its place in the operator named."""
    assert {(kind, path) for kind, path, _ in DEFAULTS} == set(USED)


@pytest.mark.parametrize(
    ("kind", "path", "default"), DEFAULTS, ids=[f"{k}.{p}" for k, p, _ in DEFAULTS]
)
def test_the_operator_uses_the_crd_default(kind: str, path: str, default: Any) -> None:
    """A spec that leaves the field out gets, from the operator, the default kubectl explain
    shows."""
    used = USED[(kind, path)](Runtime.of_minimal_specs())
    assert used == [default] * len(used)


def test_values_built_without_a_spec_take_the_same_defaults() -> None:
    """A policy or run settings built directly equal those built from a minimal spec."""
    runtime = Runtime.of_minimal_specs()
    assert PoolPolicy() == runtime.policy
    assert RunConfig(name="run", spec=runtime.run_spec) == config_from_spec(
        "run", runtime.run_spec, pools={}
    )
