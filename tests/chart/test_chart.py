"""The Helm chart, rendered by the real Helm engine: lint, schema, manifests, flags and RBAC.

Each value set below is one way a cluster admin installs the operator; every rendered object
must be accepted by a current Kubernetes release, and the chart must say the same thing in the
Deployment's flags, its RBAC and its peering objects.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import urlsplit

import helm_python as helm
import pytest
import yaml

from agentpool.api import roles
from chart.rendering import (
    ALONE,
    CHART_DIR,
    RELEASE_NAMESPACE,
    REPO_ROOT,
    Manifest,
    chart_crds,
    find,
    granted_rules,
    render_chart,
    render_notes,
)
from chart.validation import KUBE_VERSION, InvalidManifest, validate_manifest

VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "alone": ALONE,
    "watch-namespaces": {"watchNamespaces": ["team-a", "team-b"]},
    "network-policy-and-service-monitor": {
        "networkPolicy": {"enabled": True},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    },
    "two-replicas": {"replicaCount": 2, "sharePools": False},
    "two-replicas-in-namespaces": {
        "replicaCount": 2,
        "sharePools": False,
        "watchNamespaces": ["team-a"],
    },
    "shared-pools": {"replicaCount": 2, "sharePools": True, "shareLeaseSeconds": 8},
    "metrics-off": {"metrics": {"enabled": False}, "podDisruptionBudget": {"enabled": False}},
    "lease-events-off": {"leaseEvents": False},
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
        "dashboards": {"enabled": True, "folder": "agentpool"},
    },
}

# The resources only a cluster-wide or namespace-listing kopf touches.
CLUSTER_ONLY = {"customresourcedefinitions", "namespaces", "clusterkopfpeerings"}
# The gateway's reviews of its callers, cluster-scoped however many namespaces are served.
REVIEWS = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}


def _operator(manifests: list[Manifest]) -> Manifest:
    (deployment,) = find(manifests, "Deployment")
    return deployment


def _container(manifests: list[Manifest]) -> Manifest:
    containers: list[Manifest] = _operator(manifests)["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    return container


def _flag(args: list[str], name: str) -> list[str]:
    return [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{name}=")]


def _release_wide(role: Manifest) -> bool:
    """The gateway's Role (its certificate) or the replicas' (their Leases): in the release
    namespace whatever namespaces are served."""
    return str(role["metadata"]["name"]).endswith(("-gateway", "-replicas"))


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _port_names(service: Manifest) -> set[str]:
    return {port["name"] for port in service["spec"]["ports"]}


def _operator_roles(manifests: list[Manifest], kind: str) -> list[Manifest]:
    """The roles of ``kind`` bound to the operator, leaving out the caller role users bind."""
    return [r for r in find(manifests, kind) if not r["metadata"]["name"].endswith("-caller")]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Manifest]]:
    return {name: render_chart(values) for name, values in VALUE_SETS.items()}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_helm_lint_is_clean(name: str) -> None:
    """Helm's own linter, strict, for a current Kubernetes, finds nothing with these values."""
    report = helm.lint(CHART_DIR, VALUE_SETS[name], strict=True, kube_version=f"v{KUBE_VERSION}.0")
    assert report["messages"] == [], report
    assert report["errors"] == []


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_manifest_validates_strictly(name: str, rendered: dict[str, list[Manifest]]) -> None:
    """Every object rendered with these values is one a current API server accepts."""
    crds = chart_crds()
    assert rendered[name]
    for manifest in rendered[name]:
        validate_manifest(manifest, crds=crds)


def test_chart_crds_validate_strictly() -> None:
    """The CRDs Helm installs from crds/ are valid CustomResourceDefinitions."""
    crds = chart_crds()
    assert {crd["kind"] for crd in crds} == {"CustomResourceDefinition"}
    for crd in crds:
        validate_manifest(crd)


def test_validation_refuses_what_an_api_server_would(rendered: dict[str, list[Manifest]]) -> None:
    """The validation above can fail: an unknown field, a bad value and a bad custom kind."""
    manifests = rendered["network-policy-and-service-monitor"]
    deployment = copy.deepcopy(_operator(manifests))
    deployment["spec"]["template"]["spec"]["containers"][0]["liveness"] = {}
    with pytest.raises(InvalidManifest, match="liveness"):
        validate_manifest(deployment)

    deployment = copy.deepcopy(_operator(manifests))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(InvalidManifest):
        validate_manifest(deployment)

    (monitor,) = find(manifests, "ServiceMonitor")
    monitor = copy.deepcopy(monitor)
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(InvalidManifest, match="intervall"):
        validate_manifest(monitor)

    (peering,) = find(rendered["two-replicas"], "ClusterKopfPeering")
    peering = copy.deepcopy(peering)
    peering["metadata"]["namespace"] = "default"
    with pytest.raises(InvalidManifest, match="cluster-scoped"):
        validate_manifest(peering, crds=chart_crds())


def test_chart_crds_are_the_generated_ones() -> None:
    """crds/ in the chart holds byte-identical copies of the top-level CRDs generated from the
    models, plus only kopf's peering CRDs, so a Helm install serves exactly the same API."""
    top_level = {path.name: path.read_bytes() for path in (REPO_ROOT / "crds").glob("*.yaml")}
    in_chart = {path.name: path.read_bytes() for path in (CHART_DIR / "crds").glob("*.yaml")}
    assert {"agentpools.yaml", "poolruns.yaml", "agentleases.yaml"} <= set(top_level), (
        "crds/ is missing generated CRDs; run `agentpool crds`"
    )
    for filename, text in top_level.items():
        assert in_chart.get(filename) == text, (
            f"charts/agentpool/crds/{filename} differs from crds/{filename}; copy it over"
        )
    assert set(in_chart) - set(top_level) == {"kopf-peerings.yaml"}


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"replicaCount": 0}, "/replicaCount"),
        ({"shareLeaseSeconds": 1}, "/shareLeaseSeconds"),
        ({"image": {"tag": "latest"}}, "/image/tag"),
        ({"logLevel": "verbose"}, "/logLevel"),
        ({"watchNamespaces": "team-a"}, "/watchNamespaces"),
        ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"rbac": {"create": "yes"}}, "/rbac/create"),
        ({"replicas": 2}, "replicas"),
        ({"tracing": {"otlpEndpoint": "collector:4318"}}, "/tracing/otlpEndpoint"),
        ({"tracing": {"env": {"JAVA_OPTS": "-x"}}}, "/tracing/env"),
    ],
)
def test_values_schema_rejects_bad_values(values: dict[str, Any], key: str) -> None:
    """values.schema.json refuses a bad value before anything renders, naming the key."""
    with pytest.raises(helm.HelmValuesError, match=re.escape(key)):
        render_chart(values)


def test_default_values_meet_the_schema() -> None:
    """The chart's own defaults pass its schema."""
    with helm.Chart.load(CHART_DIR) as chart:
        chart.validate_schema(chart.values)


def test_every_value_is_documented() -> None:
    """Each value in values.yaml has a comment just above it that starts with its dotted key."""
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    comments: dict[str, str] = {}
    path: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        path = [(i, k) for i, k in path if i < indent] + [(indent, key)]
        first = number
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        if first < number:
            comments[".".join(k for _, k in path)] = lines[first].strip()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    undocumented = [
        key for key in _leaf_keys(values) if not comments.get(key, "").startswith(f"# {key} -- ")
    ]
    assert undocumented == []


def _leaf_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and prefix == "" and key not in _FREE_FORM:
            keys.extend(_leaf_keys(value, f"{dotted}."))
        else:
            keys.append(dotted)
    return keys


# Values that are Kubernetes objects passed through whole, documented as one.
_FREE_FORM = {"resources", "podSecurityContext", "securityContext"}


def test_flags_follow_the_values(rendered: dict[str, list[Manifest]]) -> None:
    """`agentpool run` gets the namespaces, sharing or peering, liveness, metrics, log and lease
    Event flags the values ask for, and its liveness probe points at the endpoint the flag opens.
    By default two pods share the pools."""
    defaults = rendered["defaults"]
    assert _operator(defaults)["spec"]["replicas"] == 2
    assert _flag(_container(defaults)["args"], "--share") == ["agentpool"]
    args = _container(rendered["alone"])["args"]
    assert "--all-namespaces" in args
    assert "--standalone" in args
    assert not _flag(args, "--namespace")
    assert not _flag(args, "--peering")
    assert _flag(args, "--log-level") == ["info"]
    assert "--no-lease-events" not in args
    assert "--no-lease-events" in _container(rendered["lease-events-off"])["args"]

    args = _container(rendered["watch-namespaces"])["args"]
    assert _flag(args, "--namespace") == ["team-a", "team-b"]
    assert "--all-namespaces" not in args

    args = _container(rendered["two-replicas"])["args"]
    assert "--standalone" not in args
    (peering_name,) = _flag(args, "--peering")
    (peering,) = find(rendered["two-replicas"], "ClusterKopfPeering")
    assert peering["metadata"]["name"] == peering_name

    for name, manifests in rendered.items():
        container = _container(manifests)
        assert container["command"] == ["agentpool", "run"], name
        (liveness,) = _flag(container["args"], "--liveness")
        url = urlsplit(liveness)
        assert url.scheme == "http", name
        assert url.hostname == "0.0.0.0", name
        probe = container["livenessProbe"]["httpGet"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert probe["path"] == url.path, name
        assert ports[probe["port"]] == url.port, name
        metrics = _flag(container["args"], "--metrics-port")
        if name == "metrics-off":
            assert metrics == []
            assert "metrics" not in ports
            assert not [s for s in find(manifests, "Service") if "metrics" in _port_names(s)]
        else:
            assert metrics == [str(ports["metrics"])], name


def test_flags_parse_with_the_cli(rendered: dict[str, list[Manifest]]) -> None:
    """The command line `agentpool run` actually accepts every argument list the chart renders."""
    from agentpool.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert "run" in commands
    for name, manifests in rendered.items():
        container = _container(manifests)
        args = parser.parse_args([*container["command"][1:], *container["args"]])
        assert args.command == "run", name
        assert args.lease_events is (name != "lease-events-off"), name


def test_traces_go_where_the_values_say_and_nowhere_by_default() -> None:
    """By default the operator gets no OTEL_* variable, so it sends no traces; an OTLP endpoint
    and further variables reach its container as the SDK's own variables."""
    plain = _container(render_chart({}))
    assert not [env for env in plain["env"] if env["name"].startswith("OTEL_")]
    values = {
        "tracing": {
            "otlpEndpoint": "http://otel-collector.observability:4318",
            "env": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_SERVICE_NAME": "ops"},
        }
    }
    env = {e["name"]: e.get("value") for e in _container(render_chart(values))["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert env["OTEL_SERVICE_NAME"] == "ops"


def test_operator_pod_is_non_root_and_read_only(rendered: dict[str, list[Manifest]]) -> None:
    """The operator runs as user 10001, unprivileged, on a read-only root with a /tmp scratch
    volume, from the image tagged with the chart's appVersion."""
    app_version = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]
    deployment = _operator(rendered["defaults"])
    pod = deployment["spec"]["template"]["spec"]
    container = _container(rendered["defaults"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsUser"] == 10001
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[tmp["name"]]
    assert container["image"].endswith(f":{app_version}")
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    labels = deployment["metadata"]["labels"]
    for key in ("name", "instance", "version", "managed-by", "component"):
        assert f"app.kubernetes.io/{key}" in labels


def test_rbac_is_cluster_wide_by_default(rendered: dict[str, list[Manifest]]) -> None:
    """Serving every namespace, one ClusterRole bound to the operator's account grants it all,
    and nothing for namespaces or peering, which a cluster-wide standalone kopf never touches;
    the only Role is the gateway's, for its certificate in the release namespace."""
    manifests = rendered["alone"]
    (gateway_role,) = find(manifests, "Role")
    assert gateway_role["metadata"]["namespace"] == RELEASE_NAMESPACE
    assert {r for rule in gateway_role["rules"] for r in rule["resources"]} == {"secrets"}
    (binding,) = find(manifests, "ClusterRoleBinding")
    (account,) = find(manifests, "ServiceAccount")
    (role,) = _operator_roles(manifests, "ClusterRole")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": RELEASE_NAMESPACE,
        }
    ]
    assert (
        _operator(manifests)["spec"]["template"]["spec"]["serviceAccountName"]
        == (account["metadata"]["name"])
    )
    granted = granted_rules(ALONE)
    assert ("agentpool.dev", "poolruns/status", "patch") in granted
    assert ("", "pods", "create") in granted
    assert {resource for _, resource, _ in granted} & {"namespaces", "clusterkopfpeerings"} == set()


def test_rbac_stays_inside_the_watched_namespaces(rendered: dict[str, list[Manifest]]) -> None:
    """With watchNamespaces, Roles exist in exactly those namespaces, and the ClusterRole holds
    only what kopf must see cluster-wide: CRDs and namespaces, read-only."""
    manifests = rendered["watch-namespaces"]
    roles = [r for r in find(manifests, "Role") if not _release_wide(r)]
    bindings = [b for b in find(manifests, "RoleBinding") if not _release_wide(b)]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    (cluster_role,) = _operator_roles(manifests, "ClusterRole")
    cluster = {
        (group, resource, verb)
        for rule in cluster_role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert cluster == {
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        *REVIEWS,
    }
    namespaced = granted_rules(VALUE_SETS["watch-namespaces"]) - cluster
    cluster_wide = granted_rules(VALUE_SETS["defaults"])
    assert namespaced == {
        rule for rule in cluster_wide if rule[1] not in CLUSTER_ONLY and rule not in REVIEWS
    }


def test_rbac_grants_no_wildcards_and_explains_each_rule() -> None:
    """No rule grants '*', and every rule in the RBAC template carries a comment saying why."""
    for values in VALUE_SETS.values():
        for rule in granted_rules(values):
            assert "*" not in rule
    source = (CHART_DIR / "templates" / "_rbac.tpl").read_text().splitlines()
    rules = [n for n, line in enumerate(source) if line.startswith("- apiGroups:")]
    assert rules
    for n in rules:
        assert source[n - 1].startswith("#"), f"_rbac.tpl line {n + 1} has no comment"


def test_replicas_share_a_kopf_peering(rendered: dict[str, list[Manifest]]) -> None:
    """More than one replica gets a peering object, its CRD and the RBAC to use it; one replica
    runs standalone and is replaced without overlap."""
    crd_kinds = {crd["spec"]["names"]["kind"] for crd in chart_crds()}
    assert {"ClusterKopfPeering", "KopfPeering"} <= crd_kinds

    single = rendered["alone"]
    assert not find(single, "ClusterKopfPeering")
    assert not find(single, "KopfPeering")
    assert _operator(single)["spec"]["strategy"] == {"type": "Recreate"}

    cluster = rendered["two-replicas"]
    assert len(find(cluster, "ClusterKopfPeering")) == 1
    assert "strategy" not in _operator(cluster)["spec"]
    verbs = {
        v for _, r, v in granted_rules(VALUE_SETS["two-replicas"]) if r == "clusterkopfpeerings"
    }
    assert verbs == {"get", "list", "watch", "patch"}

    namespaced = rendered["two-replicas-in-namespaces"]
    (peering,) = find(namespaced, "KopfPeering")
    assert peering["metadata"]["namespace"] == "team-a"
    assert _flag(_container(namespaced)["args"], "--peering") == [peering["metadata"]["name"]]
    (role,) = [r for r in find(namespaced, "Role") if r["metadata"]["namespace"] == "team-a"]
    assert any("kopfpeerings" in rule["resources"] for rule in role["rules"])


def test_replicas_that_share_the_pools_keep_leases_in_the_release_namespace(
    rendered: dict[str, list[Manifest]],
) -> None:
    """With sharePools, each pod runs ``--share`` under the release's name with the Lease's
    duration set, with no peering, a rolling update that adds a pod before it takes one, time to
    hand over as it stops, and a Role on Leases in the release namespace only."""
    manifests = rendered["shared-pools"]
    args = _container(manifests)["args"]
    assert _flag(args, "--share") == [_operator(manifests)["metadata"]["name"]]
    assert _flag(args, "--share-lease-seconds") == ["8"]
    assert not _flag(args, "--peering")
    assert "--standalone" not in args
    assert not find(manifests, "ClusterKopfPeering")
    assert not find(manifests, "KopfPeering")
    # A new pod first, none unavailable: the gateway's Service always has a pod.
    assert _operator(manifests)["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = _operator(manifests)["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    (role,) = [r for r in find(manifests, "Role") if r["metadata"]["name"].endswith("-replicas")]
    assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
    granted = {
        verb for rule in role["rules"] for verb in rule["verbs"] if "leases" in rule["resources"]
    }
    assert granted == {"get", "list", "create", "update", "patch", "delete"}
    (binding,) = [
        b for b in find(manifests, "RoleBinding") if b["metadata"]["name"].endswith("-replicas")
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert not [r for r in find(rendered["alone"], "Role") if "-replicas" in r["metadata"]["name"]]
    # A replica passes calls on as itself: the gateway of the one it reaches checks it.
    shared = granted_rules(VALUE_SETS["shared-pools"])
    assert ("agentpool.dev", "agentpools/call", "create") in shared
    assert ("agentpool.dev", "agentpools/proxy", "get") in shared
    assert ("agentpool.dev", "agentleases/proxy", "get") in shared
    assert ("agentpool.dev", "agentpools/call", "create") not in granted_rules(ALONE)


def test_network_policy_admits_only_the_operator(rendered: dict[str, list[Manifest]]) -> None:
    """The NetworkPolicy guards the agent pods and lets in only the operator's own pods."""
    manifests = rendered["network-policy-and-service-monitor"]
    (policy,) = [
        p for p in find(manifests, "NetworkPolicy") if p["metadata"]["name"].endswith("-agents")
    ]
    assert policy["metadata"]["namespace"] == RELEASE_NAMESPACE
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "agentpool"}}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    pod_labels = _operator(manifests)["spec"]["template"]["metadata"]["labels"]
    assert _selects(peer["podSelector"]["matchLabels"], pod_labels)
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": RELEASE_NAMESPACE
    }
    policies = find(
        render_chart({"networkPolicy": {"enabled": True}, "watchNamespaces": ["x", "y"]}),
        "NetworkPolicy",
    )
    agents = [p for p in policies if p["metadata"]["name"].endswith("-agents")]
    assert sorted(p["metadata"]["namespace"] for p in agents) == ["x", "y"]
    assert not find(rendered["defaults"], "NetworkPolicy")


def test_service_monitor_scrapes_the_metrics_service(rendered: dict[str, list[Manifest]]) -> None:
    """The ServiceMonitor selects the metrics Service, which selects the operator pods' metrics
    port, so Prometheus reaches /metrics."""
    manifests = rendered["network-policy-and-service-monitor"]
    (monitor,) = find(manifests, "ServiceMonitor")
    (service,) = [s for s in find(manifests, "Service") if "metrics" in _port_names(s)]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [RELEASE_NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    pod_labels = _operator(manifests)["spec"]["template"]["metadata"]["labels"]
    assert _selects(service["spec"]["selector"], pod_labels)
    container_ports = {p["name"] for p in _container(manifests)["ports"]}
    assert port["targetPort"] in container_ports
    assert not find(rendered["defaults"], "ServiceMonitor")


def test_service_monitor_keeps_the_pool_namespace_label(
    rendered: dict[str, list[Manifest]],
) -> None:
    """The scraped namespace label (the pool's or run's) is kept, not renamed exported_namespace
    under the operator's own, so that queries and alerts `by (namespace, pool)` group by pool."""
    (monitor,) = find(rendered["network-policy-and-service-monitor"], "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True


def test_service_monitor_without_metrics_is_refused() -> None:
    """Asking for a ServiceMonitor with metrics off fails the render with a reason."""
    values = {"serviceMonitor": {"enabled": True}, "metrics": {"enabled": False}}
    with pytest.raises(helm.HelmError, match=r"metrics\.enabled"):
        render_chart(values)


def test_pod_disruption_budget_keeps_the_operator_drainable(
    rendered: dict[str, list[Manifest]],
) -> None:
    """The PodDisruptionBudget selects the operator pods and never blocks a drain outright."""
    (budget,) = find(rendered["defaults"], "PodDisruptionBudget")
    pod_labels = _operator(rendered["defaults"])["spec"]["template"]["metadata"]["labels"]
    assert _selects(budget["spec"]["selector"]["matchLabels"], pod_labels)
    assert budget["spec"]["maxUnavailable"] >= 1


def test_notes_say_what_to_apply_next() -> None:
    """After an install Helm tells the user which examples to apply and how to watch them."""
    notes = render_notes()
    assert "kubectl get agentpools,poolruns" in notes
    applied = re.findall(r"kubectl apply -f (\S+)", notes)
    assert applied
    for path in applied:
        assert (REPO_ROOT / path).exists(), f"NOTES.txt names {path}, which does not exist"


def test_the_gateway_is_served_to_callers_of_the_acting_replica(
    rendered: dict[str, list[Manifest]],
) -> None:
    """The gateway's Service reaches the operator pods' gateway port; the flags publish its
    Service's DNS name and keep its certificate in the release namespace, naming the Service;
    a pod is Ready only while its replica acts; the operator may review its callers' tokens and
    rights, and users get a caller role granting only call, cast and proxy."""
    manifests = rendered["two-replicas"]
    container = _container(manifests)
    args = container["args"]
    (service,) = [s for s in find(manifests, "Service") if "https" in _port_names(s)]
    (port,) = service["spec"]["ports"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == port["port"] == 8443
    assert _selects(
        service["spec"]["selector"], _operator(manifests)["spec"]["template"]["metadata"]["labels"]
    )
    name = service["metadata"]["name"]
    assert _flag(args, "--gateway-port") == ["8443"]
    (url,) = _flag(args, "--gateway-url")
    assert urlsplit(url).hostname == f"{name}.{RELEASE_NAMESPACE}.svc"
    assert f"{name}.{RELEASE_NAMESPACE}.svc.cluster.local" in _flag(args, "--gateway-name")
    assert _flag(args, "--gateway-secret") == [f"{RELEASE_NAMESPACE}/agentpool-gateway-tls"]
    assert "--gateway-secret-provided" not in args
    probe = container["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"], probe["scheme"]) == ("/readyz", "gateway", "HTTPS")
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert granted_rules(VALUE_SETS["two-replicas"]) >= REVIEWS
    (caller,) = [
        r for r in find(manifests, "ClusterRole") if r["metadata"]["name"].endswith("-caller")
    ]
    assert caller["rules"] == [
        {
            "apiGroups": ["agentpool.dev"],
            "resources": ["agentpools/call", "agentpools/cast"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["agentpool.dev"],
            "resources": ["agentpools/proxy", "agentleases/proxy"],
            "verbs": ["create", "delete", "get", "patch", "update"],
        },
    ]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_roles_given_to_users_are_those_the_local_cluster_has(
    name: str, rendered: dict[str, list[Manifest]]
) -> None:
    """The ClusterRoles the chart gives users to bind (those bound to no account of the
    operator's) are, name and rules, the ones the local cluster stores as it starts
    (``agentpool.api.roles``), so a guide's ``--clusterrole=agentpool-caller`` grants the same on
    both; with ``gateway.callerRole`` false the chart gives none."""
    expected = {role["metadata"]["name"]: role["rules"] for role in roles.user_cluster_roles()}
    assert _users_roles(rendered[name]) == expected
    assert _users_roles(render_chart({"gateway": {"callerRole": False}})) == {}


def _users_roles(manifests: list[Manifest]) -> dict[str, Any]:
    bound = {binding["roleRef"]["name"] for binding in find(manifests, "ClusterRoleBinding")}
    return {
        role["metadata"]["name"]: role["rules"]
        for role in find(manifests, "ClusterRole")
        if role["metadata"]["name"] not in bound
    }


def test_a_given_certificate_is_only_read() -> None:
    """With gateway.tlsSecret the operator uses that Secret as it is: it may read it, by name,
    and nothing more."""
    values = {"gateway": {"tlsSecret": "gateway-cert"}}
    manifests = render_chart(values)
    args = _container(manifests)["args"]
    assert _flag(args, "--gateway-secret") == [f"{RELEASE_NAMESPACE}/gateway-cert"]
    assert "--gateway-secret-provided" in args
    (role,) = [r for r in find(manifests, "Role") if r["metadata"]["name"].endswith("-gateway")]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["gateway-cert"],
            "verbs": ["get"],
        }
    ]


def test_without_the_gateway_nothing_of_it_is_rendered() -> None:
    """gateway.enabled false: no Service, no readiness on it, no reviews granted, and the
    operator is told to serve none."""
    manifests = render_chart({"gateway": {"enabled": False}})
    container = _container(manifests)
    assert "--no-gateway" in container["args"]
    assert "readinessProbe" not in container
    assert not [s for s in find(manifests, "Service") if "https" in _port_names(s)]
    assert not [r for r in find(manifests, "Role") if r["metadata"]["name"].endswith("-gateway")]
    assert not REVIEWS & granted_rules({"gateway": {"enabled": False}})


def test_the_gateway_port_is_open_only_to_the_namespaces_named() -> None:
    """With networkPolicy on, the operator pods take calls on the gateway port only from the
    namespaces named (or those served), while metrics and health stay reachable."""
    manifests = render_chart(
        {
            "networkPolicy": {"enabled": True, "gatewayNamespaces": ["apps"]},
            "watchNamespaces": ["x"],
        }
    )
    (policy,) = [
        p for p in find(manifests, "NetworkPolicy") if p["metadata"]["name"].endswith("-gateway")
    ]
    assert policy["metadata"]["namespace"] == RELEASE_NAMESPACE
    pod_labels = _operator(manifests)["spec"]["template"]["metadata"]["labels"]
    assert _selects(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    gateway, *others = policy["spec"]["ingress"]
    assert gateway["ports"] == [{"port": "gateway", "protocol": "TCP"}]
    (peer,) = gateway["from"]
    assert peer["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["apps"]}
    ]
    assert {rule["ports"][0]["port"] for rule in others} == {"metrics", "health"}
    assert all("from" not in rule for rule in others)
