"""Warm schedules on the local cluster: a window open now raises the warm count, and status
shows the sizes in force and the window; a cron the CRD schema cannot check is reported on the
pool."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
from operator_support import Api, pool_spec, ready
from pool_support import lease, pool_status

from cluster import wait_for

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

#: Opens every minute and stays open an hour: open whenever the test runs.
OPEN_NOW = {"name": "always", "start": "* * * * *", "durationSeconds": 3600, "minSize": 3}


def test_a_window_open_now_raises_the_warm_count(api: Api, namespace: str) -> None:
    """minSize 1 with a window asking for 3 that is open now: three agents turn Ready, and
    status says 3 is in force because of that window."""
    api.create("agentpools", namespace, "sched", pool_spec(minSize=1, schedules=[OPEN_NOW]))
    wait_for(
        lambda: sum(1 for p in api.live_pods(namespace, "sched") if ready(p)) == 3,
        90,
        message="three Ready agents",
    )
    status = wait_for(
        lambda: (s := pool_status(api, namespace, "sched")).get("readyReplicas") == 3 and s,
        30,
        message="status with three ready",
    )
    assert status["effectiveMinSize"] == 3
    assert status["openSchedules"] == "always"
    assert status["maxSize"] == 3
    cells = wide_row(api, namespace, "sched")
    assert (cells["WARM-MIN"], cells["SCHEDULES"]) == (3, "always")


def wide_row(api: Api, namespace: str, name: str) -> dict[str, Any]:
    """The pool's row of ``kubectl get agentpools -o wide``, by column header."""
    path = f"/apis/agentpool.dev/v1alpha1/namespaces/{namespace}/agentpools/{name}"
    method, url, headers, payload, _ = api.client.param_serialize(
        "GET", path, header_params={"Accept": TABLE}, auth_settings=["BearerToken"]
    )
    response = api.client.call_api(method, url, headers, payload)
    response.read()
    table = json.loads(response.data)
    headers_ = [column["name"] for column in table["columnDefinitions"]]
    return dict(zip(headers_, table["rows"][0]["cells"], strict=True))


def test_a_cron_the_schema_cannot_check_marks_the_pool_invalid(api: Api, namespace: str) -> None:
    """Hours 17 to 9 are each in range, so the API server stores the pool; the operator's cron
    reader refuses the backward range, marks the pool Ready False, InvalidSpec, naming the
    field, and starts no agent."""
    bad = {**OPEN_NOW, "start": "0 17-9 * * *"}
    api.create("agentpools", namespace, "badcron", pool_spec(minSize=1, schedules=[bad]))
    ready_condition = wait_for(
        lambda: next(
            (
                c
                for c in pool_status(api, namespace, "badcron").get("conditions", [])
                if c["type"] == "Ready" and c["reason"] == "InvalidSpec"
            ),
            None,
        ),
        60,
        message="Ready False InvalidSpec",
    )
    assert ready_condition["status"] == "False"
    assert "spec.schedules[0].start" in ready_condition["message"]
    assert api.live_pods(namespace, "badcron") == []


def test_headroom_auto_keeps_the_idle_agents_the_observed_peak_needed(
    api: Api, namespace: str
) -> None:
    """headroom Auto on a pool of minSize 1: three leases make a peak of three agents, then go;
    once the demand samples put the median back at 0, minIdle follows the advice (peak 3 less
    median 0) up to maxSize - minSize, status says 3 is in force, three agents stay warm, and a
    HeadroomChanged Event gives the figures."""
    headroom = {"mode": "Auto", "maxStepPerMinute": 3}
    api.create("agentpools", namespace, "auto", pool_spec(minSize=1, maxSize=4, headroom=headroom))
    for n in range(3):
        lease(api, namespace, f"peak-{n}", "auto", ttlSeconds=300)
    # The peak is in the pool's demand history once its recommendation covers it.
    wait_for(
        lambda: (
            (pool_status(api, namespace, "auto").get("recommendation") or {}).get("maxSize", 0) >= 3
        ),
        120,
        message="a demand sample of three agents",
    )
    for n in range(3):
        api.delete("agentleases", namespace, f"peak-{n}")
    status = wait_for(
        lambda: (s := pool_status(api, namespace, "auto")).get("effectiveMinIdle") == 3 and s,
        120,
        message="minIdle 3 in force",
    )
    assert status["effectiveMinSize"] == 1
    changed = [
        event["message"]
        for event in api.events(namespace)
        if event.get("reason") == "HeadroomChanged"
    ]
    assert any("advice 3" in message for message in changed), changed
    wait_for(
        lambda: sum(1 for p in api.live_pods(namespace, "auto") if ready(p)) == 3,
        90,
        message="three warm agents with no lease",
    )


def test_a_time_zone_the_api_server_does_not_know_is_refused_at_apply(
    api: Api, namespace: str
) -> None:
    """A misspelt zone is refused when the pool is applied, naming the schedule's timeZone and
    the name, and nothing is stored."""
    bad = {**OPEN_NOW, "timeZone": "Europe/Berln"}
    with pytest.raises(kubernetes.client.exceptions.ApiException) as refused:
        api.create("agentpools", namespace, "badzone", pool_spec(minSize=1, schedules=[bad]))
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "spec.schedules[0]" in body, body
    assert "Europe/Berln" in body or "IANA time zone" in body, body
    assert not api.exists("agentpools", namespace, "badzone")


@pytest.mark.parametrize("start", ["0 25 * * *", "60 9 * * *", "0 9 32 * *", "0 9 * * FRY"])
def test_a_cron_field_out_of_range_is_refused_at_apply(
    api: Api, namespace: str, start: str
) -> None:
    """A field out of its range is refused when the pool is applied, naming the schedule's start
    and saying what each field may hold."""
    bad = {**OPEN_NOW, "start": start}
    with pytest.raises(kubernetes.client.exceptions.ApiException) as refused:
        api.create("agentpools", namespace, "badcron", pool_spec(minSize=1, schedules=[bad]))
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "spec.schedules[0].start" in body, body
    assert "hour 0-23" in body, body
    assert not api.exists("agentpools", namespace, "badcron")
