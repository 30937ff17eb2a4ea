"""An HTTP pool runs any HTTP server as it is: the operator probes it and sends it nothing else.

The pool runs ``tests/integration/agents/anyhttp.py``, a standard-library web server with no
``/healthz`` and nothing of the agent protocol, which prints every connection and request it
gets. It turns Ready on the default TCP probe, gets no pool token, is held by a lease without a
``/bind`` or ``/unbind``, and is taken as idle by a restarted operator without a ``/status``.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_support import Api
from pool_support import bound_agent, lease, pool_status

from cluster import wait_for

pytestmark = [pytest.mark.cluster]

ANYHTTP = ["python", "tests/integration/agents/anyhttp.py"]
#: The agent protocol's paths, none of which the operator may send an HTTP pool's agent.
PROTOCOL_PATHS = ("/healthz", "/invoke", "/status", "/reset", "/bind", "/unbind")


def agent_log(api: Api, namespace: str, agent: str) -> list[str]:
    return str(api.core.read_namespaced_pod_log(agent, namespace)).splitlines()


def served(api: Api, namespace: str) -> bool:
    status = pool_status(api, namespace, "web")
    ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
    return status.get("available") == 1 and [c["status"] for c in ready] == ["True"]


def test_an_http_pool_is_only_probed(api: Api, namespace: str, operator_cluster: Any) -> None:
    """A server that knows nothing of agentpool turns Ready on a TCP probe of the pool's port
    (it has no /healthz) and gets no token; a lease holds it and lets it go, the operator is
    killed and started again and a second lease gets the same agent at once (taken idle, not
    asked), and through it all the server sees connections from its probe and no request: none
    of /healthz, /invoke, /status, /reset, /bind, /unbind, nor any other."""
    template = {"spec": {"containers": [{"name": "agent", "command": ANYHTTP}]}}
    api.create(
        "agentpools",
        namespace,
        "web",
        {"image": "agentpool:0.1.0", "template": template, "minSize": 1, "protocol": "HTTP"},
    )
    wait_for(lambda: served(api, namespace), 90, message="the HTTP pool's agent available")
    [pod] = api.live_pods(namespace, "web")
    agent = pod["metadata"]["name"]
    [container] = pod["spec"]["containers"]
    assert container["readinessProbe"]["tcpSocket"] == {"port": 8080}
    assert "httpGet" not in container["readinessProbe"]
    assert "AGENTPOOL_TOKEN" not in [e["name"] for e in container["env"]]

    lease(api, namespace, "first", "web", ttlSeconds=600)
    assert bound_agent(api, namespace, "first") == agent
    api.delete("agentleases", namespace, "first")
    wait_for(lambda: served(api, namespace), 60, message="the agent back from its lease")

    operator_cluster.operator.kill()
    operator_cluster.operator.start()
    lease(api, namespace, "second", "web", ttlSeconds=600, checkoutTimeoutSeconds=60)
    assert bound_agent(api, namespace, "second") == agent
    api.delete("agentleases", namespace, "second")
    probed = agent_log(api, namespace, agent).count("connection")
    wait_for(
        lambda: (
            agent_log(api, namespace, agent).count("connection") >= probed + 3
            and served(api, namespace)
        ),
        60,
        message="three more probes of the agent, Ready and idle",
    )

    assert [p["metadata"]["name"] for p in api.live_pods(namespace, "web")] == [agent]
    log = agent_log(api, namespace, agent)
    assert set(log) == {"connection"}, [line for line in log if line != "connection"]
    assert not [line for line in log if line.split(" ")[-1].startswith(PROTOCOL_PATHS)]
