"""A starting pool joins its own pod listing with the pod events seen meanwhile: the newer view
of each pod wins, and a pod an event saw deleted never comes back from the listing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.pool.listing import join_listing, version


def pod(name: str, rv: str, *, uid: str | None = None, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("listed", "seen", "deleted", "expected"),
    [
        # Only listed: adopted as listed.
        ([pod("a", "5")], {}, set(), {"a": "5"}),
        # Only seen in an event: kept.
        ([], {"a": pod("a", "7")}, set(), {"a": "7"}),
        # The listing is newer than the event: the listing wins.
        ([pod("a", "9", phase="Failed")], {"a": pod("a", "7")}, set(), {"a": "9"}),
        # The event is newer than the listing: the event wins.
        ([pod("a", "5")], {"a": pod("a", "7", phase="Failed")}, set(), {"a": "7"}),
        # Deleted after the listing was taken: never revived.
        ([pod("a", "5"), pod("b", "6")], {}, {"uid-a"}, {"b": "6"}),
        # A new pod under a deleted one's name (another uid) is not the deleted one.
        ([pod("a", "8", uid="second")], {}, {"uid-a"}, {"a": "8"}),
        # Versions that are not numbers: the event, seen on the watch, is kept.
        ([pod("a", "x2")], {"a": pod("a", "x1")}, set(), {"a": "x1"}),
    ],
    ids=["listed", "seen", "listing-newer", "event-newer", "deleted", "same-name", "opaque"],
)
def test_the_newer_view_of_each_pod_wins(
    listed: list[dict[str, Any]],
    seen: dict[str, dict[str, Any]],
    deleted: set[str],
    expected: dict[str, str],
) -> None:
    joined = join_listing(listed, seen=seen, deleted=deleted)
    assert {name: p["metadata"]["resourceVersion"] for name, p in joined.items()} == expected


def test_a_version_that_is_not_a_number_is_none() -> None:
    assert version(pod("a", "12")) == 12
    assert version(pod("a", "")) is None
    assert version({"metadata": {"resourceVersion": "1e3"}}) is None


names = st.sampled_from(["a", "b", "c", "d"])
versions = st.integers(min_value=1, max_value=50).map(str)


@given(
    listed=st.dictionaries(names, versions),
    seen=st.dictionaries(names, versions),
    deleted=st.sets(names),
)
def test_no_deleted_pod_returns_and_no_seen_pod_is_lost(
    listed: dict[str, str], seen: dict[str, str], deleted: set[str]
) -> None:
    joined = join_listing(
        [pod(n, rv) for n, rv in listed.items()],
        seen={n: pod(n, rv) for n, rv in seen.items()},
        deleted={f"uid-{n}" for n in deleted},
    )
    assert set(joined) == set(seen) | (set(listed) - deleted)
    for name, found in joined.items():
        views = [int(seen[name])] if name in seen else []
        if name in listed and name not in deleted:
            views.append(int(listed[name]))
        assert int(found["metadata"]["resourceVersion"]) == max(views)
