"""AgentLease on a cluster with the real operator: how a lease ends, as a client and kopf see it.

Each test proves one promise of the AgentLease resource through the public surface: the
kubernetes client, kubectl, and the operator's own log.
"""

from __future__ import annotations

from typing import Any

from operator_support import Api, pool_spec
from pool_support import bound_agent, lease, pool_status

from cluster import wait_for

#: What kopf logs when it has to cancel a daemon, or give up on one, because it did not end by
#: itself once stopped.
KOPF_CANCELLED = ("is cancelled. Will escalate", "did not exit in time")


def kopf_cancellations(log: str) -> int:
    return sum(log.count(words) for words in KOPF_CANCELLED)


def test_deleting_leases_ends_their_daemons_without_kopf_cancelling_them(
    api: Api, namespace: str, operator_cluster: Any
) -> None:
    """A deleted lease's daemon ends by itself, whether the lease still waits for an agent or
    holds one that goes back through a reset: kopf never cancels it (no "Daemon 'lease_loop' is
    cancelled. Will escalate" warning), and the agent is back in the pool."""
    api.create("agentpools", namespace, "p", pool_spec(minSize=1, resetBetweenItems=True))
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 60)
    lease(api, namespace, "held", "p")
    bound_agent(api, namespace, "held")
    lease(api, namespace, "queued", "p", checkoutTimeoutSeconds=300)
    wait_for(lambda: pool_status(api, namespace, "p").get("waiting") == 1, 30)
    before = kopf_cancellations(operator_cluster.operator.log())

    api.delete("agentleases", namespace, "queued")
    wait_for(lambda: not api.exists("agentleases", namespace, "queued"), 60, message="queued gone")
    wait_for(lambda: pool_status(api, namespace, "p").get("waiting") == 0, 30)
    api.delete("agentleases", namespace, "held")
    wait_for(lambda: not api.exists("agentleases", namespace, "held"), 60, message="held gone")
    wait_for(lambda: pool_status(api, namespace, "p").get("available") == 1, 30)
    api.delete("agentpools", namespace, "p")
    wait_for(lambda: not api.exists("agentpools", namespace, "p"), 60, message="pool gone")

    log = operator_cluster.operator.log()
    assert kopf_cancellations(log) == before, log[-4000:]
