"""The manifests the operator creates for a pool: agent pods, the per-pool token Secret, and
the token Secret of each lease bound to one of its agents.

Pure functions from an AgentPool (its validated spec, and its object for the name and owner) to the
objects that should exist. The pool handler calls them and hands the result to the Kubernetes API
module; tests call them directly.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agentpool import API_VERSION
from agentpool.api import AgentPoolSpec, Probe
from agentpool.api.leases import TOKEN_SECRET_SUFFIX
from agentpool.api.pools import PROBE_TIMINGS
from agentpool.wire import protocol

POOL_LABEL = "agentpool.dev/pool"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NAME_LABEL = "app.kubernetes.io/name"
TEMPLATE_HASH_ANNOTATION = "agentpool.dev/template-hash"
#: A digest of the token the agent was started with (never the token): one that differs from
#: the pool's token now marks an agent that would answer the operator 401.
TOKEN_HASH_ANNOTATION = "agentpool.dev/token-hash"
TOKEN_KEY = "token"


def pool_labels(pool_name: str) -> dict[str, str]:
    """The labels every agent pod of the pool carries; the pool's selector matches them."""
    return {
        POOL_LABEL: pool_name,
        MANAGED_BY_LABEL: "agentpool",
        NAME_LABEL: pool_name,
    }


def pool_selector(pool_name: str) -> str:
    """The label selector, as a string, that ``status.selector`` reports for the scale
    subresource."""
    return f"{POOL_LABEL}={pool_name}"


def token_secret_name(pool_name: str) -> str:
    return f"{pool_name}-agent-token"


def lease_token_secret_name(lease_name: str) -> str:
    return f"{lease_name}{TOKEN_SECRET_SUFFIX}"


def owner_reference(obj: Mapping[str, Any], *, block: bool = True) -> dict[str, Any]:
    """A controller ownerReference to ``obj``, so deleting it collects what it owns; ``block``
    holds a foreground deletion of ``obj`` until the owned object is gone."""
    return {
        "apiVersion": obj.get("apiVersion", API_VERSION),
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether ``obj`` belongs to the owner with ``uid``, not to an earlier one of the same name.

    An object naming no controller is taken as the owner's (it may predate owner references).
    """
    owners = [
        ref for ref in obj.get("metadata", {}).get("ownerReferences") or [] if ref.get("controller")
    ]
    return not uid or not owners or any(ref.get("uid") == uid for ref in owners)


def template_hash(spec: AgentPoolSpec) -> str:
    """A short digest of everything in the spec that shapes an agent pod.

    Agents whose pod carries another digest are outdated and are replaced as they fall idle. The
    probe is digested as the spec gives it, so that a default the operator fills in later does
    not replace every agent.
    """
    probe = spec.readiness_probe
    shaping = {
        "image": spec.image,
        "template": spec.template,
        "port": spec.port,
        "readinessProbe": _given(probe) if probe is not None else None,
    }
    if spec.slots != 1:
        # Only when set, so that pools from before slots keep their digest and their agents.
        shaping["slots"] = spec.slots
    if not spec.speaks_protocol:
        # An HTTP pool's pods differ (no token, another default probe); only when set, as slots.
        shaping["protocol"] = spec.protocol
    canonical = json.dumps(shaping, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def token_secret(pool: Mapping[str, Any], token: str) -> dict[str, Any]:
    """The Secret holding the bearer token the pool's agents demand on every request."""
    name = pool["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": token_secret_name(name),
            "namespace": pool["metadata"]["namespace"],
            "labels": pool_labels(name),
            "ownerReferences": [owner_reference(pool)],
        },
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def lease_token_secret(lease: Mapping[str, Any], pool_name: str, token: str) -> dict[str, Any]:
    """The Secret holding a lease's own token, which its client reads (``status.tokenSecretRef``).

    The lease owns it, so it goes with the lease even if the operator is not there to delete it.
    It does not block the lease's deletion: the operator deletes it itself when the lease ends,
    and blocking would need a grant on the lease's finalizers that nothing else needs.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": lease_token_secret_name(lease["metadata"]["name"]),
            "namespace": lease["metadata"]["namespace"],
            "labels": {POOL_LABEL: pool_name, MANAGED_BY_LABEL: "agentpool"},
            "ownerReferences": [owner_reference(lease, block=False)],
        },
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def token_hash(token: str) -> str:
    """A short digest of a pool token, to tell which token an agent holds without naming it."""
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def read_token(secret: Mapping[str, Any]) -> str:
    """The token stored in a Secret made by :func:`token_secret`."""
    return base64.b64decode(secret["data"][TOKEN_KEY]).decode()


def mounts_service_account(pod_spec: dict[str, Any]) -> bool:
    """Whether the template asks for a service account token: it names an account, or says
    itself whether to mount one."""
    return any(
        key in pod_spec
        for key in ("serviceAccountName", "serviceAccount", "automountServiceAccountToken")
    )


def _given(probe: Probe) -> dict[str, Any]:
    """A probe in wire form with only the fields that were given (or filled in), as a pod's."""
    return probe.model_dump(by_alias=True, mode="json", exclude_unset=True)


def readiness_probe(spec: AgentPoolSpec) -> dict[str, Any]:
    """The readiness probe of the pool's agent pods: the spec's effective probe (see
    :meth:`AgentPoolSpec.effective_readiness_probe`) with the operator's timings where it sets
    none."""
    return {**PROBE_TIMINGS, **_given(spec.effective_readiness_probe())}


def agent_pod(pool: Mapping[str, Any], *, spec: AgentPoolSpec, token: str = "") -> dict[str, Any]:
    """The manifest of one new agent pod for ``pool``, whose validated spec is ``spec``.

    ``template`` gives everything; ``image`` fills the first container. The operator adds the
    labels, an ownerReference, the port, the slot count, the token from the pool's Secret and,
    unless the spec or template names them, the readiness probe on ``/healthz`` that admits the
    agent to the pool, the termination message policy FallbackToLogsOnError, and no service
    account token.

    An HTTP pool's agent is an app that knows nothing of agentpool: it is handed no token (no
    ``AGENTPOOL_TOKEN``, no token annotation), and its default probe is a TCP connection to the
    port. ``AGENT_PORT``, ``AGENTPOOL_SLOTS`` and ``AGENTPOOL_POOL`` are plain facts it may read
    or ignore, so it gets them as any agent does.
    """
    name = pool["metadata"]["name"]
    port = spec.port
    template = copy.deepcopy(spec.template or {})
    template_meta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = template.get("spec") or {}

    containers: list[dict[str, Any]] = pod_spec.setdefault("containers", [])
    if not containers:
        containers.append({"name": "agent"})
    agent = containers[0]
    agent.setdefault("name", "agent")
    if spec.image:
        agent["image"] = spec.image

    env = [e for e in agent.get("env", []) if e.get("name") not in _OPERATOR_ENV]
    env += [
        {"name": protocol.PORT_ENV, "value": str(port)},
        {"name": protocol.SLOTS_ENV, "value": str(spec.slots)},
        {"name": "AGENTPOOL_POOL", "value": name},
    ]
    if spec.speaks_protocol:
        env.append(
            {
                "name": protocol.TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {"name": token_secret_name(name), "key": TOKEN_KEY},
                },
            }
        )
    agent["env"] = env
    ports = [p for p in agent.get("ports", []) if p.get("containerPort") != port]
    agent["ports"] = [{"name": "agent", "containerPort": port, "protocol": "TCP"}, *ports]
    # A probe the spec gives replaces the template's; without one, the template's stands.
    if spec.readiness_probe is not None and _given(spec.readiness_probe):
        agent["readinessProbe"] = readiness_probe(spec)
    else:
        agent.setdefault("readinessProbe", readiness_probe(spec))
    # An agent that crashes while it starts has rarely written a termination message: the end of
    # its output (a traceback's last line, say) becomes it, so the pod and the pool say why.
    agent.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    # A crashed agent's pod fails and the pool replaces it; restarting it in place would hide
    # the crash from the pool and hand out an agent that lost its warm state.
    pod_spec.setdefault("restartPolicy", "Never")
    if not mounts_service_account(pod_spec):
        # An agent runs code its leases' clients talk to: without a service account named for
        # it, it gets no credential to the Kubernetes API (the namespace's default one).
        pod_spec["automountServiceAccountToken"] = False

    labels = {**(template_meta.get("labels") or {}), **pool_labels(name)}
    annotations = {
        **(template_meta.get("annotations") or {}),
        TEMPLATE_HASH_ANNOTATION: template_hash(spec),
    }
    if token and spec.speaks_protocol:
        annotations[TOKEN_HASH_ANNOTATION] = token_hash(token)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-",
            "namespace": pool["metadata"]["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(pool)],
        },
        "spec": pod_spec,
    }


_OPERATOR_ENV = frozenset(
    {protocol.PORT_ENV, protocol.SLOTS_ENV, "AGENTPOOL_POOL", protocol.TOKEN_ENV}
)
