"""The API server's check of a schedule's cron at apply: no cron the operator reads is refused,
and a field out of its range never reaches the operator."""

from __future__ import annotations

from datetime import UTC, datetime

import cronsim
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.api.pools import CRON_FIELDS
from agentpool.local.apiserver.schema.celrules import evaluate_rule

RULE = f"self.start.matches(r'^{CRON_FIELDS}$')"
#: Each field's range, as cron reads it.
RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
MONTHS = ["JAN", "feb", "Mar", "APR", "may", "JUN", "jul", "AUG", "sep", "OCT", "nov", "DEC"]
DAYS = ["SUN", "mon", "Tue", "WED", "thu", "FRI", "sat"]


def _allowed(start: str) -> bool:
    return evaluate_rule(RULE, {"start": start}).passed


# Compiled once here: the CEL parser raises the recursion limit on its first use, which
# hypothesis would take for a test's doing.
assert _allowed("* * * * *")


def _reads(start: str) -> bool:
    try:
        cronsim.CronSim(start, datetime(2026, 1, 1, tzinfo=UTC))
    except cronsim.CronSimError:
        return False
    return True


@st.composite
def fields(draw: st.DrawFn, position: int) -> str:
    low, high = RANGES[position]
    names = {3: MONTHS, 4: DAYS}.get(position)

    def item() -> str:
        kind = draw(
            st.sampled_from(["*", "value", "range", "name"] if names else ["*", "value", "range"])
        )
        if kind == "*":
            text = "*"
        elif kind == "name":
            assert names is not None
            text = draw(st.sampled_from(names))
        else:
            first = draw(st.integers(low, high))
            text = str(first)
            if kind == "range":
                text += f"-{draw(st.integers(first, high))}"
        if kind != "name" and draw(st.booleans()):
            text += f"/{draw(st.integers(1, high))}"
        return text

    return ",".join(item() for _ in range(draw(st.integers(1, 3))))


@settings(max_examples=300, deadline=None)
@given(st.tuples(*(fields(position) for position in range(5))))
def test_every_cron_the_operator_reads_is_allowed_at_apply(parts: tuple[str, ...]) -> None:
    start = " ".join(parts)
    if _reads(start):
        assert _allowed(start), start


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 4),
    st.integers(0, 200),
    st.tuples(*(fields(position) for position in range(5))),
)
def test_a_value_out_of_its_fields_range_is_refused_at_apply(
    position: int, beyond: int, parts: tuple[str, ...]
) -> None:
    out = RANGES[position][1] + 1 + beyond
    start = " ".join(str(out) if n == position else part for n, part in enumerate(parts))
    assert not _allowed(start), start
    assert not _reads(start), start
