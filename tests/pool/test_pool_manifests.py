"""The pods and Secrets the operator creates for a pool and its leases, and how it reads a pod
back."""

from __future__ import annotations

from typing import Any

import pytest

from agentpool.api import AgentPoolSpec
from agentpool.pool.manifests import (
    agent_pod,
    lease_token_secret,
    read_token,
    template_hash,
    token_secret,
)
from agentpool.pool.pods import PodFailure, failure_of, observe_pod

POOL: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentPool",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
    "spec": {
        "image": "agent:1",
        "port": 9000,
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "command": ["run"],
                        "env": [
                            {"name": "MODEL", "value": "m"},
                            {"name": "AGENT_PORT", "value": "1"},
                        ],
                    }
                ]
            },
        },
    },
}


def pod_of(pool: dict[str, Any]) -> dict[str, Any]:
    """The agent pod of ``pool``, its spec validated as the pool handler does."""
    return agent_pod(pool, spec=AgentPoolSpec.model_validate(pool["spec"]))


def test_agent_pod_carries_labels_owner_token_and_port() -> None:
    """The pod is labelled for the pool's selector, owned by the pool, given the port and the
    token by reference (never by value), and keeps the template's own settings."""
    pod = pod_of(POOL)
    meta = pod["metadata"]
    assert meta["generateName"] == "p-"
    assert meta["labels"] == {
        "team": "a",
        "agentpool.dev/pool": "p",
        "app.kubernetes.io/managed-by": "agentpool",
        "app.kubernetes.io/name": "p",
    }
    assert meta["ownerReferences"][0] == {
        "apiVersion": "agentpool.dev/v1alpha1",
        "kind": "AgentPool",
        "name": "p",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    container = pod["spec"]["containers"][0]
    assert container["image"] == "agent:1"
    assert container["command"] == ["run"]
    env = {e["name"]: e for e in container["env"]}
    assert env["MODEL"]["value"] == "m"
    assert env["AGENT_PORT"]["value"] == "9000"
    assert env["AGENTPOOL_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "p-agent-token",
        "key": "token",
    }
    assert container["ports"][0]["containerPort"] == 9000
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 9000}
    assert pod["spec"]["restartPolicy"] == "Never"


def test_an_agent_that_crashes_reports_the_end_of_its_output() -> None:
    """The agent container falls back to its last output as the termination message when it
    exits with an error, so a crash at start-up says why; a template's own policy stands."""
    container = pod_of(POOL)["spec"]["containers"][0]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    spec = POOL["spec"]
    [given] = spec["template"]["spec"]["containers"]
    own = {**given, "terminationMessagePolicy": "File"}
    pool = {**POOL, "spec": {**spec, "template": {"spec": {"containers": [own]}}}}
    assert pod_of(pool)["spec"]["containers"][0]["terminationMessagePolicy"] == "File"


@pytest.mark.parametrize(
    ("given", "handler", "expected"),
    [
        ({"periodSeconds": 5}, "httpGet", {"path": "/healthz", "port": 9000}),
        ({"httpGet": {"path": "/ready"}}, "httpGet", {"path": "/ready", "port": 9000}),
        ({"tcpSocket": {}}, "tcpSocket", {"port": 9000}),
        ({"exec": {"command": ["true"]}}, "exec", {"command": ["true"]}),
    ],
)
def test_a_partial_readiness_probe_is_completed(
    given: dict[str, Any], handler: str, expected: dict[str, Any]
) -> None:
    """A probe without a handler gets GET /healthz, and a handler without a port the pool's."""
    pool = {**POOL, "spec": {**POOL["spec"], "readinessProbe": given}}
    probe = pod_of(pool)["spec"]["containers"][0]["readinessProbe"]
    assert probe[handler] == expected
    assert [k for k in ("httpGet", "tcpSocket", "exec") if k in probe] == [handler]


def test_template_hash_follows_what_shapes_the_pod() -> None:
    """Changing the image or template changes the hash (agents are replaced); sizes do not."""
    spec = POOL["spec"]

    def digest(raw: dict[str, Any]) -> str:
        return template_hash(AgentPoolSpec.model_validate(raw))

    assert digest(spec) == digest({**spec, "minSize": 5, "maxSize": 9})
    assert digest(spec) != digest({**spec, "image": "agent:2"})


HTTP_POOL: dict[str, Any] = {**POOL, "spec": {**POOL["spec"], "protocol": "HTTP"}}


def test_an_http_pools_agent_is_handed_no_token() -> None:
    """An app that knows nothing of agentpool gets no secret: no AGENTPOOL_TOKEN (not even one
    its template names), no reference to the pool's Secret, no token digest; it keeps the plain
    facts any agent gets (its port, its slots, its pool's name)."""
    pod = agent_pod(HTTP_POOL, spec=AgentPoolSpec.model_validate(HTTP_POOL["spec"]), token="s3cret")
    [container] = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "AGENTPOOL_TOKEN" not in env
    assert "p-agent-token" not in str(pod)
    assert "agentpool.dev/token-hash" not in pod["metadata"]["annotations"]
    assert "volumes" not in pod["spec"]
    assert {name: env[name]["value"] for name in ("AGENT_PORT", "AGENTPOOL_SLOTS")} == {
        "AGENT_PORT": "9000",
        "AGENTPOOL_SLOTS": "1",
    }
    assert env["AGENTPOOL_POOL"]["value"] == "p"
    assert env["MODEL"]["value"] == "m"
    native = agent_pod(POOL, spec=AgentPoolSpec.model_validate(POOL["spec"]), token="s3cret")
    assert "agentpool.dev/token-hash" in native["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("given", "container_probe", "expected"),
    [
        # Nothing given: a TCP connection to the pool's port, not GET /healthz.
        (None, None, {"tcpSocket": {"port": 9000}}),
        ({"periodSeconds": 5}, None, {"tcpSocket": {"port": 9000}, "periodSeconds": 5}),
        ({"httpGet": {"path": "/up"}}, None, {"httpGet": {"path": "/up", "port": 9000}}),
        # The template's own probe stands when the spec gives none.
        (
            None,
            {"httpGet": {"path": "/ping", "port": 9000}},
            {"httpGet": {"path": "/ping", "port": 9000}},
        ),
    ],
)
def test_an_http_pools_agent_is_probed_by_tcp_unless_told(
    given: dict[str, Any] | None,
    container_probe: dict[str, Any] | None,
    expected: dict[str, Any],
) -> None:
    """An HTTP pool's health is its readiness probe: the spec's or the template's, and with
    neither a TCP connection to its port, since an arbitrary server may serve no /healthz."""
    spec = dict(HTTP_POOL["spec"])
    if given is not None:
        spec["readinessProbe"] = given
    if container_probe is not None:
        [container] = spec["template"]["spec"]["containers"]
        containers = [{**container, "readinessProbe": container_probe}]
        spec["template"] = {"spec": {"containers": containers}}
    probe = pod_of({**HTTP_POOL, "spec": spec})["spec"]["containers"][0]["readinessProbe"]
    handlers = [k for k in ("httpGet", "tcpSocket", "exec") if k in probe]
    assert handlers == [k for k in ("httpGet", "tcpSocket", "exec") if k in expected]
    assert {key: probe[key] for key in expected} == expected


def test_changing_the_protocol_replaces_the_agents() -> None:
    """An HTTP pool's pods differ from an Agentpool pool's, so a change of protocol rolls the
    agents; a pool that leaves protocol at its default keeps the digest it had before."""
    spec = AgentPoolSpec.model_validate(POOL["spec"])
    assert template_hash(spec) == template_hash(spec.model_copy(update={"protocol": "Agentpool"}))
    assert template_hash(spec) != template_hash(AgentPoolSpec.model_validate(HTTP_POOL["spec"]))


def test_token_secret_round_trips() -> None:
    """The token is stored base64 in the pool's Secret and read back unchanged."""
    secret = token_secret(POOL, "s3cret")
    assert secret["metadata"]["name"] == "p-agent-token"
    assert "s3cret" not in str(secret)
    assert read_token(secret) == "s3cret"


@pytest.mark.parametrize(
    ("template_spec", "automount"),
    [
        # Nothing said: no credential to the Kubernetes API in an agent's pod.
        ({}, False),
        ({"serviceAccountName": "agent-reader"}, None),
        ({"serviceAccount": "agent-reader"}, None),
        ({"automountServiceAccountToken": True}, True),
        ({"automountServiceAccountToken": False}, False),
        ({"serviceAccountName": "agent-reader", "automountServiceAccountToken": False}, False),
    ],
)
def test_agent_pods_mount_no_service_account_token_unless_the_template_asks(
    template_spec: dict[str, Any], automount: bool | None
) -> None:
    """An agent pod gets automountServiceAccountToken false, unless its template names a
    service account (whose own setting then holds) or says itself whether to mount one."""
    template = {"spec": {**template_spec, "containers": [{"name": "a", "command": ["run"]}]}}
    pool = {**POOL, "spec": {**POOL["spec"], "template": template}}
    assert pod_of(pool)["spec"].get("automountServiceAccountToken") is automount


LEASE: dict[str, Any] = {
    "apiVersion": "agentpool.dev/v1alpha1",
    "kind": "AgentLease",
    "metadata": {"name": "chat", "namespace": "ns", "uid": "l-1"},
}


def test_a_lease_token_secret_is_the_leases_own() -> None:
    """The lease's token is kept in <lease>-lease-token, owned by the lease (so it goes with it)
    without blocking the lease's deletion, and never in the pool's Secret."""
    secret = lease_token_secret(LEASE, "p", "l3ase")
    assert secret["metadata"]["name"] == "chat-lease-token"
    assert secret["metadata"]["name"] != token_secret(POOL, "s3cret")["metadata"]["name"]
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "agentpool.dev/v1alpha1",
            "kind": "AgentLease",
            "name": "chat",
            "uid": "l-1",
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert "l3ase" not in str(secret)
    assert read_token(secret) == "l3ase"


def pod(status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p-1", "creationTimestamp": "2026-01-01T00:00:00Z", **meta},
        "spec": {"nodeName": "local"},
        "status": status,
    }


STAMP = "2026-01-01T00:01:00Z"


def test_observe_pod_reads_when_a_pod_being_deleted_should_be_gone() -> None:
    """Its deletion stamp plus its deletion grace period, else its spec's, else 30 s."""
    start = observe_pod(pod({}, deletionTimestamp=STAMP)).created_at
    assert observe_pod(pod({})).gone_by is None
    assert observe_pod(pod({}, deletionTimestamp=STAMP)).gone_by == start + 60 + 30
    graced = pod({}, deletionTimestamp=STAMP, deletionGracePeriodSeconds=5)
    assert observe_pod(graced).gone_by == start + 60 + 5
    spec_graced = pod({}, deletionTimestamp=STAMP)
    spec_graced["spec"]["terminationGracePeriodSeconds"] = 0
    assert observe_pod(spec_graced).gone_by == start + 60


def test_observe_pod_reads_readiness_and_failure() -> None:
    """Ready means Running with Ready=True; a failed or crash-looping pod is failed."""
    ready = pod(
        {
            "phase": "Running",
            "podIP": "127.0.0.2",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:04Z"}
            ],
        }
    )
    seen = observe_pod(ready)
    assert seen.ready
    assert seen.cold_start_seconds == 4.0
    assert seen.ip == "127.0.0.2"
    assert not observe_pod(pod({"phase": "Running"}, deletionTimestamp=STAMP)).ready
    crashing = pod(
        {
            "phase": "Running",
            "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
        }
    )
    assert observe_pod(crashing).failed
    assert observe_pod(crashing).running_since is None
    assert observe_pod(pod({"phase": "Failed"})).failed


def test_observe_pod_reads_when_the_container_started_running() -> None:
    """A running container's start is when the pool starts to wait for its readiness probe."""
    started = {"running": {"startedAt": "2026-01-01T00:00:03Z"}}
    seen = observe_pod(pod({"phase": "Running", "containerStatuses": [{"state": started}]}))
    assert seen.running_since == observe_pod(pod({})).created_at + 3.0
    assert observe_pod(pod({"phase": "Pending"})).running_since is None
    # With a sidecar listed first, the agent container's start counts, not the sidecar's.
    sidecar = {"running": {"startedAt": "2026-01-01T00:00:01Z"}}
    two = pod(
        {
            "phase": "Running",
            "containerStatuses": [
                {"name": "proxy", "state": sidecar},
                {"name": "agent", "state": started},
            ],
        }
    )
    two["spec"]["containers"] = [{"name": "agent"}, {"name": "proxy"}]
    assert observe_pod(two).running_since == observe_pod(pod({})).created_at + 3.0


def test_failure_of_names_the_pod_and_the_cause() -> None:
    """The pod's own reason first; a container crash reads as CrashLoopBackOff with its code and
    the last line of its termination message (a traceback ends with the exception)."""
    no_command = pod({"phase": "Failed", "reason": "NoLocalCommand", "message": "give a command"})
    assert failure_of(no_command) == PodFailure("p-1", "NoLocalCommand", "give a command")
    crashed = pod(
        {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
        }
    )
    assert failure_of(crashed) == PodFailure(
        "p-1", "CrashLoopBackOff", "agent p-1 exited with code 3: Error"
    )
    traceback = "loading\nTraceback (most recent call last):\n  ...\nOSError: no model\n\n"
    told = pod(
        {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": traceback}}}
            ],
        }
    )
    assert failure_of(told).message == "agent p-1 exited with code 1: OSError: no model"
    long = pod(
        {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "message": "x" * 1000 + "\n"}}}
            ],
        }
    )
    assert failure_of(long).message == "agent p-1 exited with code 1: " + "x" * 239 + "…"
