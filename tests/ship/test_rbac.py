"""The chart's RBAC grants exactly what the operator uses, judged by what it really sent.

The operator ran behind a recording proxy through a scenario covering runs, retries, TTL deletion,
result ConfigMaps, a deadlock, a lease, a scale-down and pool deletion, as one operator acting
alone on every namespace. Its requests, as (apiGroup, resource, verb), are compared with the rules
the chart renders for one pod acting alone (``ALONE``); what sharing the pools adds is held by
``tests/chart``, and proved on a real authorizer by the Helm test.
"""

from __future__ import annotations

import pytest

from chart.rendering import ADMISSION_ONLY, ALONE, granted_requests, granted_rules
from ship.scenario import NAMESPACE, Outcome

pytestmark = pytest.mark.local_only(
    "the scenario starts a local cluster of its own behind a recording proxy, which the local "
    "pass runs; on a real cluster the Helm test proves the chart's RBAC"
)


def _show(accesses: set[tuple[str, str, str]]) -> str:
    return "\n".join(f"  {g or 'core'} {r} {v}" for g, r, v in sorted(accesses))


def _used(outcome: Outcome) -> set[tuple[str, str, str]]:
    return {(a.group, a.resource, a.verb) for a in outcome.accesses}


def test_every_request_of_the_operator_is_granted(operator_outcome: Outcome) -> None:
    """No request the operator made would be forbidden on a cluster by the chart's RBAC."""
    used = _used(operator_outcome)
    assert used, "the proxy saw no request from the operator"
    missing = used - granted_rules(ALONE)
    assert not missing, "the operator sent requests the chart does not grant:\n" + _show(missing)


def test_every_grant_is_used(operator_outcome: Outcome) -> None:
    """Each rule of the chart (but those only admission checks) served a request in the scenario,
    so the operator holds no permission it does not need."""
    unused = granted_rules(ALONE) - ADMISSION_ONLY - _used(operator_outcome)
    assert not unused, "the chart grants what the operator never asked for:\n" + _show(unused)


def test_the_proxy_saw_what_the_api_server_served(operator_outcome: Outcome) -> None:
    """Every request the proxy recorded reached the API server under the same (verb, resource),
    so the proxy's reading of URLs agrees with the server's and the comparison above is sound."""
    counts = operator_outcome.server_counts
    for access, n in operator_outcome.accesses.items():
        assert counts.get((access.verb, access.resource), 0) >= n, access
    used = {(a.verb, a.resource) for a in operator_outcome.accesses}
    assert used <= granted_requests(ALONE)


def test_namespaced_operator_needs_only_the_namespaced_grants(namespaced_outcome: Outcome) -> None:
    """Serving a list of namespaces (``watchNamespaces``), every request is granted by the Roles
    and the small ClusterRole the chart renders then, and the namespace reads granted only in
    that mode are ones the operator makes."""
    run = namespaced_outcome.main_run
    assert run["phase"] == "Succeeded", run
    used = _used(namespaced_outcome)
    granted = granted_rules({**ALONE, "watchNamespaces": [NAMESPACE]})
    missing = used - granted
    assert not missing, "the operator sent requests the chart does not grant:\n" + _show(missing)
    only_here = granted - granted_rules(ALONE)
    assert only_here, "the chart grants nothing extra for watchNamespaces"
    assert only_here <= used, "granted for watchNamespaces but never used:\n" + _show(
        only_here - used
    )
