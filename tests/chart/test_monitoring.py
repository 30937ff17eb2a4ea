"""The chart's alerts and Grafana dashboard, rendered by the real Helm engine and read as
Prometheus and Grafana would read them.

An SRE who turns them on gets rules whose every expression parses as PromQL, queries only series
the operator exports, keeps the labels its text names, and links a troubleshooting section of the
manual by condition reason; and a dashboard the Grafana sidecar finds, whose every query parses
and draws the operator's own series.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import promql_parser
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentpool import metrics
from agentpool.api.reasons import ConditionType, Reason, RetireReason
from chart.rendering import CHART_DIR, RELEASE_NAMESPACE, REPO_ROOT, Manifest, find, render_chart
from chart.validation import InvalidManifest, validate_manifest

MONITORING: dict[str, Any] = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "dashboards": {"enabled": True},
}
TROUBLESHOOTING = REPO_ROOT / "docs" / "troubleshooting.md"
DEFAULT_RUNBOOKS = "https://agentpool.dev/docs/troubleshooting/#"
TEMPLATED_ANCHOR = "{{ $labels.reason | toLower }}"

# The reasons each templated runbook link may be filled with: the words the pool core writes into
# a Degraded condition (pool/status.py, and a start failure's pod reason in pool/health.py), and
# those a failed run ends with (runs/ending.py). Retirement reasons come from the alert's own
# matcher on the reason label.
REASONS_OF: dict[str, frozenset[str]] = {
    "agentpool_pool_degraded": frozenset(
        {
            Reason.UNSCHEDULABLE,
            Reason.IMAGE_PULL_BACK_OFF,
            Reason.CRASH_LOOP_BACK_OFF,
            Reason.CREATE_CONTAINER_CONFIG_ERROR,
            Reason.READINESS_FAILING,
            Reason.POD_FAILED,
            Reason.NO_LOCAL_COMMAND,
        }
    ),
    "agentpool_runs_finished_total": frozenset(
        {
            Reason.DEADLOCKED,
            Reason.ITEMS_FAILED,
            Reason.SOURCE_FAILED,
            Reason.SOURCE_NOT_FOUND,
            Reason.SOURCE_INVALID,
            Reason.SOURCE_UNREACHABLE,
            Reason.SOURCE_CHANGED,
        }
    ),
}
# The one alert on a series the operator cannot export itself: whether Prometheus reaches it.
SCRAPE_SERIES = {"AgentPoolOperatorDown": {"up"}}
# Runbook anchors that are no condition reason: the operator itself being down.
NON_REASON_ANCHORS = {"operatordown"}

# Grafana's built-in variables, replaced by what Grafana would put there before parsing a query.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "30s", "$__range": "6h"}


@pytest.fixture(scope="module")
def monitoring() -> list[Manifest]:
    return render_chart(MONITORING)


@pytest.fixture(scope="module")
def alerts(monitoring: list[Manifest]) -> list[dict[str, Any]]:
    (rule,) = find(monitoring, "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


@pytest.fixture(scope="module")
def dashboard(monitoring: list[Manifest]) -> dict[str, Any]:
    (config_map,) = find(monitoring, "ConfigMap")
    (text,) = config_map["data"].values()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def exported_series() -> set[str]:
    """Every series name the operator's registry serves: a counter as ``_total``, a histogram
    as its ``_bucket``, ``_sum`` and ``_count``, a gauge as itself."""
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def selectors(expr: promql_parser.Expr) -> Iterator[promql_parser.VectorSelector]:
    """Every series selector in the expression, however deep."""
    found: list[promql_parser.VectorSelector] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)

    promql_parser.walk(expr, visit)
    return iter(found)


def metric_name(selector: promql_parser.VectorSelector) -> str:
    if selector.name:
        return str(selector.name)
    names = [m.value for m in selector.matchers.matchers if m.name == "__name__"]
    assert names, f"{selector} selects series by labels alone"
    return str(names[0])


def metric_names(expr: str) -> set[str]:
    return {metric_name(s) for s in selectors(promql_parser.parse(expr))}


ANY = frozenset({"*"})


def kept_labels(node: promql_parser.Expr) -> frozenset[str]:
    """The labels every series of the expression's result is sure to carry, as far as its
    aggregations and matchings say; ``ANY`` where the series' own labels pass through."""
    if isinstance(node, promql_parser.VectorSelector):
        return ANY
    if isinstance(node, promql_parser.MatrixSelector):
        return kept_labels(node.vector_selector)
    if isinstance(node, promql_parser.ParenExpr | promql_parser.SubqueryExpr):
        return kept_labels(node.expr)
    if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        return frozenset()
    if isinstance(node, promql_parser.AggregateExpr):
        modifier = node.modifier
        if modifier is None or modifier.type != promql_parser.AggModifierType.By:
            return frozenset() if modifier is None else ANY
        return frozenset(modifier.labels)
    if isinstance(node, promql_parser.Call):
        name = node.func.name
        if name == "absent":
            # Labels only from a bare selector's equality matchers; absent(x == 1) has none.
            (argument,) = node.args
            if not isinstance(argument, promql_parser.VectorSelector):
                return frozenset()
            return frozenset(
                m.name
                for m in argument.matchers.matchers
                if m.op == promql_parser.MatchOp.Equal and m.name != "__name__"
            )
        vectors = [a for a in node.args if not isinstance(a, promql_parser.NumberLiteral)]
        labels = kept_labels(vectors[-1])
        return labels - {"le"} if name == "histogram_quantile" else labels
    if isinstance(node, promql_parser.BinaryExpr):
        left, right = kept_labels(node.lhs), kept_labels(node.rhs)
        if isinstance(node.rhs, promql_parser.NumberLiteral):
            return left
        if isinstance(node.lhs, promql_parser.NumberLiteral):
            return right
        if str(node.op) == "or":
            return left & right if ANY not in (left, right) else (right if left == ANY else left)
        matching = node.modifier.matching if node.modifier is not None else None
        if (
            matching is not None
            and matching.type == promql_parser.LabelModifierType.Include
            and node.modifier.card == promql_parser.VectorMatchCardinality.OneToOne
        ):
            return frozenset(matching.labels)
        return left
    if isinstance(node, promql_parser.UnaryExpr):
        return kept_labels(node.expr)
    raise AssertionError(f"no rule for {type(node).__name__} in {node}")


def anchors(alert: dict[str, Any]) -> set[str]:
    """The troubleshooting anchors the alert's runbook link can point at."""
    url = alert["annotations"]["runbook_url"]
    assert url.startswith(DEFAULT_RUNBOOKS), url
    anchor = url.removeprefix(DEFAULT_RUNBOOKS)
    if anchor != TEMPLATED_ANCHOR:
        return {anchor}
    expr = promql_parser.parse(alert["expr"])
    values: set[str] = set()
    for selector in selectors(expr):
        matched = [m for m in selector.matchers.matchers if m.name == "reason"]
        if matched:
            values.update(v for m in matched for v in str(m.value).split("|"))
        else:
            values.update(REASONS_OF[metric_name(selector)])
    return {value.lower() for value in values}


def heading_anchors(markdown: str) -> set[str]:
    """The anchors a docs site (and GitHub) makes of the markdown's headings."""
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", markdown, re.MULTILINE):
        text = re.sub(r"[`*_\[\]()]", "", heading).strip().lower()
        found.add(re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", text)))
    return found


# Rendering, on and off


def test_off_by_default() -> None:
    """A default install renders neither rules nor dashboards."""
    manifests = render_chart()
    assert not find(manifests, "PrometheusRule")
    assert not find(manifests, "ConfigMap")


@pytest.mark.parametrize("key", ["prometheusRule", "dashboards"])
def test_monitoring_without_metrics_is_refused(key: str) -> None:
    """Alerts or a dashboard with metrics off would read nothing: the render fails saying so."""
    with pytest.raises(helm.HelmError, match=rf"{key}\.enabled needs metrics\.enabled"):
        render_chart({key: {"enabled": True}, "metrics": {"enabled": False}})


def test_rule_and_dashboard_validate(monitoring: list[Manifest]) -> None:
    """The ConfigMap passes kubernetes-validate; the PrometheusRule has the structure of the
    Prometheus Operator's CRD; and a rule with a typo in a field is refused."""
    (rule,) = find(monitoring, "PrometheusRule")
    (config_map,) = find(monitoring, "ConfigMap")
    validate_manifest(rule)
    validate_manifest(config_map)
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["fore"] = "5m"
    with pytest.raises(InvalidManifest, match="fore"):
        validate_manifest(broken)


def test_the_rule_is_found_by_the_prometheus_that_selects_its_labels() -> None:
    """prometheusRule.labels land on the PrometheusRule, for a Prometheus's ruleSelector."""
    values = copy.deepcopy(MONITORING)
    values["prometheusRule"]["labels"] = {"release": "kube-prometheus-stack"}
    (rule,) = find(render_chart(values), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["namespace"] == RELEASE_NAMESPACE


# The alerts


def test_the_alerts_a_pool_owner_acts_on(alerts: list[dict[str, Any]]) -> None:
    """Degraded pools, agents failing or not starting, checkouts waiting or timing out, runs and
    items failing, and the operator down each have an alert."""
    assert {a["alert"] for a in alerts} == {
        "AgentPoolOperatorDown",
        "AgentPoolDegraded",
        "AgentPoolAgentsFailing",
        "AgentPoolAgentsNotStarting",
        "AgentPoolCheckoutsWaiting",
        "AgentPoolCheckoutsSlow",
        "AgentPoolCheckoutTimeouts",
        "PoolRunsFailing",
        "PoolRunItemsFailing",
    }


def test_every_alert_expression_parses(alerts: list[dict[str, Any]]) -> None:
    """Prometheus would load every rule: each expression is valid PromQL."""
    for alert in alerts:
        try:
            promql_parser.parse(alert["expr"])
        except ValueError as error:
            pytest.fail(f"{alert['alert']}: {error}: {alert['expr']}")


def test_the_parser_refuses_a_broken_expression() -> None:
    """The check above can fail."""
    with pytest.raises(ValueError, match="parenthesis"):
        promql_parser.parse("sum(rate(agentpool_items_total[5m])")


def test_every_alert_reads_series_the_operator_exports(alerts: list[dict[str, Any]]) -> None:
    """An alert on a misspelt or removed metric never fires: each one it reads is served."""
    exported = exported_series()
    for alert in alerts:
        allowed = exported | SCRAPE_SERIES.get(alert["alert"], set())
        unknown = metric_names(alert["expr"]) - allowed
        assert not unknown, f"{alert['alert']} reads series nobody exports: {unknown}"


def test_every_alert_says_what_and_where(alerts: list[dict[str, Any]]) -> None:
    """Each alert has a severity, a summary and a description; its text names the namespace
    and the pool or run (or, for runs that ended, which have no series of their own, the reason
    they ended with); and every label its text names is one its expression keeps, so none
    renders empty."""
    for alert in alerts:
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = alert["annotations"]
        assert annotations["summary"].strip(), name
        assert annotations["description"].strip(), name
        used = set(re.findall(r"\$labels\.(\w+)", json.dumps(annotations)))
        if name not in SCRAPE_SERIES:
            assert "namespace" in used, name
            assert used & {"pool", "run", "reason"}, name
        kept = kept_labels(promql_parser.parse(alert["expr"]))
        assert kept == ANY or used <= kept, f"{name} names {used - kept}, which it drops"


def test_operator_down_watches_the_service_monitors_job(alerts: list[dict[str, Any]]) -> None:
    """The operator-down alert watches the job the ServiceMonitor's scrape gets (the metrics
    Service's name) in the release namespace, or the job named in values."""
    (down,) = (a for a in alerts if a["alert"] == "AgentPoolOperatorDown")
    assert 'job="agentpool-metrics"' in down["expr"]
    assert f'namespace="{RELEASE_NAMESPACE}"' in down["expr"]
    values = copy.deepcopy(MONITORING)
    values["prometheusRule"]["operatorJob"] = "my-scrape"
    (rule,) = find(render_chart(values), "PrometheusRule")
    (down,) = (
        r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == down["alert"]
    )
    assert 'job="my-scrape"' in down["expr"]


def test_every_runbook_anchor_is_a_reason(alerts: list[dict[str, Any]]) -> None:
    """Each alert links troubleshooting/#<reason> under the manual's base URL, and the anchor
    is a reason the operator writes (lower case), or one of the few that name no reason."""
    reasons = {str(r).lower() for r in (*Reason, *RetireReason, *ConditionType)}
    for alert in alerts:
        for anchor in anchors(alert):
            assert re.fullmatch(r"[a-z0-9-]+", anchor), (alert["alert"], anchor)
            assert anchor in reasons | NON_REASON_ANCHORS, (alert["alert"], anchor)


def test_runbook_base_url_follows_the_values() -> None:
    """prometheusRule.runbookBaseUrl moves every link to where the manual is served."""
    values = copy.deepcopy(MONITORING)
    values["prometheusRule"]["runbookBaseUrl"] = "https://docs.example.com/agentpool/"
    (rule,) = find(render_chart(values), "PrometheusRule")
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert alert["annotations"]["runbook_url"].startswith(
                "https://docs.example.com/agentpool/troubleshooting/#"
            )


def test_every_runbook_anchor_is_a_heading_of_the_manual(alerts: list[dict[str, Any]]) -> None:
    """Each link lands on a heading of docs/troubleshooting.md (`## ReasonName` each)."""
    if not TROUBLESHOOTING.exists():
        pytest.skip(
            "docs/troubleshooting.md is not written yet; once it is, each alert's runbook "
            "anchor must be one of its headings"
        )
    headings = heading_anchors(TROUBLESHOOTING.read_text())
    missing = {(alert["alert"], anchor) for alert in alerts for anchor in anchors(alert)} - {
        (a["alert"], h) for a in alerts for h in headings
    }
    assert not missing, f"runbook anchors with no heading in {TROUBLESHOOTING.name}: {missing}"


def test_heading_anchors_are_what_a_docs_site_makes() -> None:
    """The anchors read off the manual are the lower-case heading words."""
    text = "# Troubleshooting\n\n## ImagePullBackOff\n\ntext\n\n### `CheckoutTimeout`\n"
    assert heading_anchors(text) == {"troubleshooting", "imagepullbackoff", "checkouttimeout"}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # Each example is a Helm render: report the example found rather than spend minutes of CPU
    # shrinking it.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    duration=st.from_regex(r"\A([0-9]{1,3}(ms|s|m|h|d|w|y)){1,3}\Z"),
    seconds=st.floats(min_value=0.001, max_value=29.999),
    ratio=st.floats(min_value=0.001, max_value=1),
    failures=st.integers(min_value=1, max_value=10_000),
)
def test_thresholds_are_refused_or_give_rules_that_parse(
    duration: str, seconds: float, ratio: float, failures: int
) -> None:
    """Any duration is either refused by the values schema, or renders, with any bounds the
    schema admits, to rules Prometheus loads: no value the chart admits breaks the rules
    (durations such as 1ms1ms, 1m1h or 0m, which Prometheus cannot read, are refused)."""
    values = copy.deepcopy(MONITORING)
    values["prometheusRule"].update(
        waitingFor=duration,
        startingFor=duration,
        degradedFor=duration,
        checkoutSeconds=seconds,
        itemFailureRatio=ratio,
        agentFailures=failures,
    )
    try:
        manifests = render_chart(values)
    except helm.HelmValuesError as error:
        refused = str(error)
    else:
        refused = ""
    if refused:
        assert "/prometheusRule/" in refused
        return
    (rule,) = find(manifests, "PrometheusRule")
    validate_manifest(rule)
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            promql_parser.parse(alert["expr"])


def test_a_duration_prometheus_cannot_read_is_refused() -> None:
    """Units repeated or out of order, and zero (no range to look over), are refused when the
    chart is installed, not when Prometheus loads the rule."""
    for duration in ("1ms1ms", "1m1h", "10 minutes", "", "0m", "00s"):
        values = copy.deepcopy(MONITORING)
        values["prometheusRule"]["waitingFor"] = duration
        with pytest.raises(helm.HelmValuesError, match="waitingFor"):
            render_chart(values)
    values["prometheusRule"]["waitingFor"] = "1h30m"
    (rule,) = find(render_chart(values), "PrometheusRule")
    assert any("[1h30m]" in r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("waitingFor", "10 minutes"),
        ("checkoutSeconds", 30),
        ("checkoutSeconds", 0),
        ("itemFailureRatio", 1.5),
        ("agentFailures", 0),
        ("runbookBaseUrl", "https://agentpool.dev/docs"),
        ("runbookBaseUrl", "agentpool.dev/docs/"),
    ],
)
def test_bad_thresholds_are_refused_naming_the_value(field: str, value: object) -> None:
    """A duration Prometheus cannot read, a bound the histogram cannot reach, a ratio past 1 or
    a base URL that would not join with troubleshooting/ fails the install naming the value."""
    values = copy.deepcopy(MONITORING)
    values["prometheusRule"][field] = value
    with pytest.raises(helm.HelmError, match=rf"prometheusRule.*{field}|{field}.*prometheusRule"):
        render_chart(values)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            "promtool is not installed (Debian's prometheus package has it): Prometheus's own "
            "check of the rules and of their firing is skipped; the PromQL parser checks above ran"
        )
    return found


def test_prometheus_loads_the_rules(alerts: list[dict[str, Any]], tmp_path: Path) -> None:
    """Prometheus's own rule checker accepts every rule, its annotation templates included."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "agentpool", "rules": alerts}]}))
    checked = subprocess.run(
        [promtool(), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts)} rules found" in checked.stdout


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    """One input series of a promtool test, in namespace team-a unless told."""
    labels = {"namespace": "team-a", **labels}
    text = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{text}}}", "values": values}


def fired(name: str, anchor: str, severity: str = "warning", **labels: str) -> dict[str, Any]:
    """What promtool should see fire: the alert's labels and its runbook link."""
    return {
        "alertname": name,
        "exp_labels": {"severity": severity, **labels},
        "anchor": anchor,
    }


# Each alert's trouble beside a healthy neighbour, sampled every minute for 30 minutes; at
# minute 25 exactly the troubled ones fire, each with its labels and runbook link.
TROUBLE = [
    series("up", "1x4 0x26", job="agentpool-metrics", namespace=RELEASE_NAMESPACE, instance="a"),
    series("agentpool_pool_degraded", "1x30", pool="coder", reason="ImagePullBackOff"),
    series("agentpool_pool_degraded", "0x30", pool="calm", reason="AsExpected"),
    series("agentpool_agents_retired_total", "0+1x30", pool="crashy", reason="Failed"),
    series("agentpool_agents_retired_total", "0+1x30", pool="calm", reason="IdleTimeout"),
    series("agentpool_agents", "1x30", pool="stuck", state="starting"),
    series("agentpool_agents_created_total", "1x30", pool="stuck"),
    series("agentpool_agents", "1x30", pool="growing", state="starting"),
    series("agentpool_agents_created_total", "0+1x30", pool="growing"),
    series("agentpool_waiters", "2x30", pool="busy"),
    series("agentpool_waiters", " ".join(["2", "0"] * 15) + " 2", pool="bursty"),
    series("agentpool_checkout_timeouts_total", "0+1x30", pool="busy"),
    series("agentpool_checkout_timeouts_total", "0x30", pool="calm"),
    *(
        series("agentpool_checkout_seconds_bucket", values, pool="slow", kind="scaleup", le=le)
        for le, values in (("1", "0x30"), ("10", "0+1x30"), ("30", "0+20x30"), ("+Inf", "0+20x30"))
    ),
    *(
        series("agentpool_checkout_seconds_bucket", "0+20x30", pool="calm", kind="warm", le=le)
        for le in ("1", "10", "30", "+Inf")
    ),
    series("agentpool_runs_finished_total", "0x10 1x20", phase="Failed", reason="Deadlocked"),
    series("agentpool_runs_finished_total", "0+1x30", phase="Succeeded", reason="Drained"),
    series("agentpool_items_total", "0+3x30", run="bad", outcome="failed"),
    series("agentpool_items_total", "0+1x30", run="bad", outcome="succeeded"),
    series("agentpool_items_total", "0x30", run="good", outcome="failed"),
    series("agentpool_items_total", "0+5x30", run="good", outcome="succeeded"),
]
FIRING = [
    fired(
        "AgentPoolOperatorDown", "operatordown", severity="critical", namespace=RELEASE_NAMESPACE
    ),
    fired(
        "AgentPoolDegraded",
        "imagepullbackoff",
        namespace="team-a",
        pool="coder",
        reason="ImagePullBackOff",
    ),
    fired("AgentPoolAgentsFailing", "failed", namespace="team-a", pool="crashy", reason="Failed"),
    fired("AgentPoolAgentsNotStarting", "agentsstarting", namespace="team-a", pool="stuck"),
    fired("AgentPoolCheckoutsWaiting", "nocapacity", namespace="team-a", pool="busy"),
    fired("AgentPoolCheckoutsSlow", "nocapacity", namespace="team-a", pool="slow"),
    fired("AgentPoolCheckoutTimeouts", "checkouttimeout", namespace="team-a", pool="busy"),
    fired("PoolRunsFailing", "deadlocked", namespace="team-a", reason="Deadlocked"),
    fired("PoolRunItemsFailing", "itemsfailed", namespace="team-a", run="bad"),
]


def test_each_alert_fires_on_its_trouble_and_not_on_a_healthy_neighbour(
    alerts: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Prometheus's rule tester, fed each alert's trouble beside a healthy pool or run: at
    minute 25 every alert fires for the troubled one only, with its labels and its runbook link
    filled in; at minute 3, before any `for` has run out or the operator went down, the alerts
    that wait are quiet."""
    # Only the runbook link is compared: the other annotations are prose that the checker above
    # parses.
    rules = [
        {**alert, "annotations": {"runbook_url": alert["annotations"]["runbook_url"]}}
        for alert in alerts
    ]
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "agentpool", "rules": rules}]})
    )
    assert {f["alertname"] for f in FIRING} == {a["alert"] for a in alerts}
    waiting = [a["alert"] for a in alerts if "for" in a]
    cases = [
        {
            "eval_time": "25m",
            "alertname": f["alertname"],
            "exp_alerts": [
                {
                    "exp_labels": f["exp_labels"],
                    "exp_annotations": {"runbook_url": DEFAULT_RUNBOOKS + f["anchor"]},
                }
            ],
        }
        for f in FIRING
    ] + [{"eval_time": "3m", "alertname": name, "exp_alerts": []} for name in waiting]
    suite = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": TROUBLE, "alert_rule_test": cases}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(suite))
    tested = subprocess.run(
        [promtool(), "test", "rules", "test.yaml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


# The dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable, Grafana's variables filled."""
    for panel in panels(dashboard):
        for target in panel["targets"]:
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            inner = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert inner, f"variable {variable['name']}: {query}"
            yield f"variable {variable['name']}", inner.group(1)


def filled(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def test_the_sidecar_finds_the_dashboard(monitoring: list[Manifest]) -> None:
    """The ConfigMap carries grafana_dashboard: "1" and the folder asked for, and holds the
    chart's dashboards/ JSON as is."""
    values = copy.deepcopy(MONITORING)
    values["dashboards"].update(folder="Agents", namespace="monitoring")
    (config_map,) = find(render_chart(values), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"]["grafana_folder"] == "Agents"
    assert config_map["metadata"]["namespace"] == "monitoring"
    files = sorted(Path(CHART_DIR / "dashboards").glob("*.json"))
    assert files
    assert {name: json.loads(text) for name, text in config_map["data"].items()} == {
        f.name: json.loads(f.read_text()) for f in files
    }


def test_every_dashboard_query_parses(dashboard: dict[str, Any]) -> None:
    """Each panel's and variable's query is valid PromQL once Grafana fills its variables."""
    for where, expr in queries(dashboard):
        try:
            promql_parser.parse(filled(expr))
        except ValueError as error:
            pytest.fail(f"{where}: {error}: {expr}")


def test_the_dashboard_draws_every_series_the_operator_exports(
    dashboard: dict[str, Any],
) -> None:
    """Each query reads only series the operator exports, and every metric family the operator
    exports is drawn somewhere, so a new metric without a panel fails here."""
    exported = exported_series()
    drawn: set[str] = set()
    for where, expr in queries(dashboard):
        names = metric_names(filled(expr))
        assert names <= exported, f"{where} reads series nobody exports: {names - exported}"
        drawn |= names
    families = {
        f.name + ("_total" if f.type == "counter" else "") for f in metrics.REGISTRY.collect()
    }
    undrawn = {
        family
        for family in families
        if not any(name == family or name.startswith(f"{family}_") for name in drawn)
    }
    assert not undrawn, f"no panel draws {undrawn}"


def test_the_dashboard_covers_pools_checkouts_calls_runs_and_churn(
    dashboard: dict[str, Any],
) -> None:
    """The rows an SRE looks for, and in them pool size, ready, busy and idle agents."""
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Pools", "Checkouts", "Gateway calls", "Runs", "Agent churn"]
    (sizes,) = (p for p in panels(dashboard) if p["title"] == "Pool size, ready, busy and idle")
    assert [t["legendFormat"] for t in sizes["targets"]] == ["size", "ready", "busy", "idle"]


def test_the_dashboard_is_laid_out_and_filtered(dashboard: dict[str, Any]) -> None:
    """Panels have unique ids and do not overlap on Grafana's 24-column grid; each uses the
    data source variable, and each variable a query names is defined."""
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in panels(dashboard):
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$(?!__)(\w+)", target["expr"]))
            assert used <= defined, f"{panel['title']}: {used - defined}"
