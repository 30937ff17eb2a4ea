"""The ``agentpool`` command line: the entry point users and the operator image run.

Each subcommand parses its arguments here and hands off to the module that does the work, imported
lazily so that ``agentpool crds`` does not pay for kopf and ``agentpool run`` does not pay for the
local cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentpool.handlers.gatewaysetup import GatewayOptions
    from agentpool.io.connection import Connection
    from agentpool.io.kube import Kube


def _cmd_crds(args: argparse.Namespace) -> int:
    from agentpool.api.crds import render_crds

    rendered = render_crds()
    targets = [Path(args.out)]
    if args.chart and Path(args.chart).parent.is_dir():
        targets.append(Path(args.chart))
    if args.check:
        stale = [
            out / filename
            for out in targets
            for filename, text in rendered.items()
            if not (out / filename).exists() or (out / filename).read_text() != text
        ]
        for path in stale:
            print(
                f"{path} differs from what the models in agentpool.api generate; "
                "run `agentpool crds` to regenerate it",
                file=sys.stderr,
            )
        if stale:
            return 1
        print(f"{len(rendered)} CRDs in {', '.join(map(str, targets))} match the models")
        return 0
    for out in targets:
        out.mkdir(parents=True, exist_ok=True)
        for filename, text in rendered.items():
            (out / filename).write_text(text)
            print(f"wrote {out / filename}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from agentpool import tracing
    from agentpool.handlers.operator import Peering, run_operator, sharing_of

    if args.priority is not None and args.peering is None:
        print(
            "agentpool run: --priority needs --peering NAME: a replica alone outranks no one",
            file=sys.stderr,
        )
        return 2
    try:
        # Traces are off unless the standard OTEL_* variables turn them on.
        provider = tracing.install()
    except tracing.TracingConfigError as error:
        print(f"agentpool: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.log_level != "debug":
        # kopf reports every handled pod event at info; keep the log for what needs attention.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if provider is not None:
        logging.getLogger("agentpool").info("traces on: %s", tracing.describe(os.environ))
    stop_metrics = None
    if args.metrics_port:
        from agentpool.metrics import serve_metrics

        stop_metrics = serve_metrics(args.metrics_port, args.metrics_host)
    namespaces = [] if args.all_namespaces else args.namespace
    peering = None if args.standalone else args.peering
    sharing = None
    if args.share is not None:
        sharing = sharing_of(args.share, args.share_namespace, args.share_lease_seconds)
    try:
        asyncio.run(
            run_operator(
                _connection(args),
                namespaces=namespaces,
                liveness_endpoint=args.liveness,
                peering=None if peering is None else Peering.of(peering, args.priority),
                state_dir=Path(args.state_dir) if args.state_dir else None,
                gateway=_gateway_options(args),
                lease_events=args.lease_events,
                sharing=sharing,
            )
        )
    finally:
        if stop_metrics is not None:
            stop_metrics()
        tracing.shutdown(provider)
    return 0


def _gateway_options(args: argparse.Namespace) -> GatewayOptions | None:
    from agentpool.handlers.gatewaysetup import GatewayOptions

    if not args.gateway:
        return None
    namespace, _, name = args.gateway_secret.rpartition("/")
    return GatewayOptions(
        host=args.gateway_host,
        port=args.gateway_port,
        url=args.gateway_url,
        secret_namespace=namespace,
        secret_name=name,
        manage_secret=not args.gateway_secret_provided,
        hosts=tuple(args.gateway_name),
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    import asyncio

    from agentpool.console.demo import demo

    return asyncio.run(demo())


def _connection(args: argparse.Namespace) -> Connection:
    from agentpool.io.connection import Connection

    return Connection(
        server=args.server,
        context=args.context,
        kubeconfig=args.kubeconfig,
        ca_path=args.certificate_authority,
        token=args.token,
    )


def _client_for(args: argparse.Namespace) -> Kube:
    from agentpool.io.kube import Kube

    return Kube.connect(_connection(args))


def _cmd_watch(args: argparse.Namespace) -> int:
    import asyncio

    from agentpool.console.runs import watch_run

    kube = _client_for(args)
    try:
        return asyncio.run(watch_run(kube, args.namespace, args.run, timeout=args.timeout))
    finally:
        kube.close()


def _cmd_results(args: argparse.Namespace) -> int:
    import asyncio

    from agentpool.console.runs import collect_results, print_results
    from agentpool.io.kube import ObjectNotFound

    kube = _client_for(args)
    try:
        records = asyncio.run(collect_results(kube, args.namespace, args.run))
    except ObjectNotFound:
        print(f'poolrun "{args.run}" not found in namespace "{args.namespace}"', file=sys.stderr)
        return 2
    finally:
        kube.close()
    print_results(records)
    return 0


def _json_argument(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None


def _at_least_two(text: str) -> int:
    """A Lease's duration in whole seconds, as the Lease holds it: 2 at least, or its five
    renewals would each have to land within a few hundred milliseconds."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"{value} is too short: give 2 seconds or more")
    return value


def _cmd_lease(args: argparse.Namespace) -> int:
    from agentpool.console.leases import run_lease

    return run_lease(args)


def _add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The pool and the lease, for ``agentpool lease``. The lease's context is --lease-context,
    the AgentLease's spec.context, so that --context is the kubeconfig's as everywhere."""
    _add_pool_options(parser)
    parser.add_argument(
        "--lease-context",
        type=_json_argument,
        metavar="JSON",
        help="the lease's context handed to the agent when it binds (spec.context), as JSON",
    )


class _DeprecatedFlag(argparse.Action):
    """A flag's old spelling, kept for one release: it stores into the new flag's place and
    says on stderr which spelling to use instead."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, instead: str, **kw: Any):
        self.instead = instead
        super().__init__(option_strings, dest, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(
            f"agentpool: {option_string} is deprecated and goes in the next release; "
            f"use {self.instead}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def _add_pool_options(parser: argparse.ArgumentParser) -> None:
    """The pool and how to reach its cluster, for the commands that use the Python client."""
    parser.add_argument("pool", help="the AgentPool's name")
    parser.add_argument(
        "--checkout-timeout",
        type=float,
        help="seconds to wait for an agent (default: the pool's checkoutTimeoutSeconds)",
    )
    parser.add_argument(
        "--namespace", "-n", help="the pool's namespace (default: the kubeconfig context's)"
    )
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--kube-context",
        dest="context",
        action=_DeprecatedFlag,
        instead="--context",
        help=argparse.SUPPRESS,
    )


def _add_connection_options(parser: argparse.ArgumentParser, *, server_default: str) -> None:
    """How to reach the API server, named and resolved as kubectl's own flags are."""
    parser.add_argument("--server", help=f"API server URL (default: {server_default})")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--certificate-authority", help="CA file (PEM) for the server's certificate"
    )
    parser.add_argument("--token", help="bearer token for the API server")


def _add_gateway_options(parser: argparse.ArgumentParser) -> None:
    """Where the operator serves calls and casts over HTTPS, and with which certificate."""
    from agentpool.api.gateway import DEFAULT_PORT, DEFAULT_SECRET

    group = parser.add_argument_group("gateway (calls and casts over HTTPS)")
    add = group.add_argument
    add("--no-gateway", dest="gateway", action="store_false", help="serve no gateway")
    add("--gateway-host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    add("--gateway-port", type=int, default=DEFAULT_PORT, help="port (0: any free one)")
    add("--gateway-url", help="the URL the namespaces' agentpool-gateway ConfigMaps give")
    add(
        "--gateway-name",
        action="append",
        default=[],
        metavar="HOST",
        help="a name the certificate holds beside the URL's host and localhost (repeatable)",
    )
    add(
        "--gateway-secret",
        default=DEFAULT_SECRET,
        metavar="[NAMESPACE/]NAME",
        help="the Secret of the gateway's certificate, made on first start "
        "(default namespace: $POD_NAMESPACE, else default)",
    )
    add(
        "--gateway-secret-provided",
        action="store_true",
        help="the Secret is provided (cert-manager, say): use it as it is, never write it",
    )


def _add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", default="default", help="the run's namespace")
    _add_connection_options(parser, server_default="kubeconfig")


def _cmd_local_up(args: argparse.Namespace) -> int:
    from agentpool.local.apiserver.storage.store import HistoryLimits
    from agentpool.local.up import run_up

    directory = Path(args.dir)
    operator = None
    if args.operator:
        from agentpool.handlers.operator import embedded_operator

        operator = embedded_operator(directory.resolve() / "operator")
    history = HistoryLimits.of(seconds=args.history_seconds, mib=args.history_mib)
    return run_up(directory, port=args.port, operator=operator, history=history)


def _installed_version() -> str:
    """The version of the installed distribution, as pip recorded it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentpool")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from agentpool.console import submits
    from agentpool.console.calls import add_commands

    parser = argparse.ArgumentParser(
        prog="agentpool",
        description="Keep pools of warm agents on Kubernetes and drive work items through them.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    crds = sub.add_parser(
        "crds",
        help="write the CRDs generated from the API models",
        description="Write the CustomResourceDefinitions that the pydantic models in "
        "agentpool.api generate, into crds/ and the Helm chart's copy; with --check, write "
        "nothing and fail when the files have drifted from the models.",
    )
    crds.add_argument("--out", default="crds", help="directory to write into (default: crds)")
    crds.add_argument(
        "--chart",
        default="charts/agentpool/crds",
        help="the Helm chart's copy, kept identical (default: charts/agentpool/crds; '' skips it)",
    )
    crds.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1, naming each file, if the files differ from the models",
    )
    crds.set_defaults(func=_cmd_crds)

    run = sub.add_parser(
        "run",
        help="run the operator against a cluster",
        description="Run the operator in the foreground against the cluster the connection "
        "flags name (in-cluster, then the kubeconfig): it keeps the AgentPools' agents warm, "
        "binds AgentLeases, drives PoolRuns and serves calls and casts over its gateway.",
    )
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeat for several); default: all namespaces",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    peering = run.add_mutually_exclusive_group()
    peering.add_argument(
        "--standalone", action="store_true", help="act alone, without kopf peering (default)"
    )
    peering.add_argument(
        "--peering",
        metavar="NAME",
        default=None,
        help="coordinate with other replicas through the named kopf peering object",
    )
    peering.add_argument(
        "--share",
        metavar="NAME",
        default=None,
        help="share the pools with the other replicas of the group NAME: each works on the pools "
        "assigned to it through coordination.k8s.io Leases in --share-namespace",
    )
    run.add_argument(
        "--share-lease-seconds",
        metavar="N",
        type=_at_least_two,
        default=5,
        help="how many seconds each replica's Lease lasts from its last renewal, renewed five "
        "times as often: a crashed replica's pools go to the others about this long after "
        "(default: 5 seconds)",
    )
    run.add_argument(
        "--share-namespace",
        metavar="NS",
        default=None,
        help="where the replicas' Leases are (default: $POD_NAMESPACE, else default)",
    )
    run.add_argument(
        "--priority",
        type=int,
        default=None,
        metavar="N",
        help="this replica's priority in the peering: the highest acts, and replicas that share "
        "one all pause (default: drawn at random, so that no two share it)",
    )
    run.add_argument("--liveness", metavar="URL", help="serve a liveness endpoint at this URL")
    run.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve Prometheus metrics at /metrics on this port (default: 0, none)",
    )
    run.add_argument(
        "--metrics-host",
        default="0.0.0.0",
        metavar="ADDRESS",
        help="the address the metrics port listens on, 127.0.0.1 to keep it to this machine "
        "(default: 0.0.0.0, every IPv4 address, so that Prometheus in the cluster reaches it)",
    )
    run.add_argument(
        "--state-dir",
        default=os.environ.get("AGENTPOOL_STATE_DIR") or None,
        help="directory for the runs' journals, so a crash re-runs only the items in flight "
        "(default: $AGENTPOOL_STATE_DIR; without one a crash may re-run up to cap finished items)",
    )
    run.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log records written (default: info)",
    )
    run.add_argument(
        "--no-lease-events",
        dest="lease_events",
        action="store_false",
        help="post no LeaseBound or LeaseExpired Events on the leases' pools (counted, one write"
        " per pool and reason every 30 s at most)",
    )
    _add_gateway_options(run)
    _add_connection_options(run, server_default="in-cluster, then kubeconfig")
    run.set_defaults(func=_cmd_run)

    demo = sub.add_parser(
        "demo",
        help="run the quickstart on a local cluster, show the outcome, and clean up",
        description="Start a local cluster (API server, kubelet, operator) in a temporary "
        "directory, apply examples/quickstart (a pool of slow-starting agents and a run of "
        "forty items, a few of which fail), show the run's progress and its failures, then "
        "shut everything down. Needs no cluster and no kubeconfig; exits 0 when the run drained.",
    )
    demo.set_defaults(func=_cmd_demo)

    watch = sub.add_parser(
        "watch",
        help="show a PoolRun's progress until it ends",
        description="Show a PoolRun's progress (items done, failed, rate, time left) until it "
        "ends; exit 0 when it succeeded, 1 when it failed, 3 when --timeout ran out first.",
    )
    watch.add_argument("run", help="the PoolRun's name")
    watch.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up after this many seconds (default: wait until the run ends)",
    )
    _add_client_options(watch)
    watch.set_defaults(func=_cmd_watch)

    results = sub.add_parser(
        "results",
        help="print a PoolRun's outputs and failures as JSON Lines",
        description="Print every output and failure a PoolRun recorded, one JSON object a line, "
        "including those kept in the run's result ConfigMaps.",
    )
    results.add_argument("run", help="the PoolRun's name")
    _add_client_options(results)
    results.set_defaults(func=_cmd_results)
    add_commands(sub, _json_argument, _add_pool_options)
    submits.add_command(sub, _json_argument, _add_pool_options)

    lease = sub.add_parser(
        "lease",
        help="hold an agent of a pool until Ctrl-C or SIGTERM releases it",
        description="Hold one agent of a pool for your own tools (curl, a notebook): print its "
        "endpoint, the lease's name and the kubectl command that reads its token, renew the "
        "lease while running, and delete it on Ctrl-C or SIGTERM.",
    )
    _add_agent_options(lease)
    lease.add_argument(
        "--ttl", type=int, help="seconds the agent stays held if this command dies (default: 60)"
    )
    lease.set_defaults(func=_cmd_lease)

    local = sub.add_parser(
        "local",
        help="run a local cluster: API server, kubelet and operator",
        description="A local Kubernetes-compatible cluster for trying agentpool and for tests: "
        "an API server, a kubelet that runs pods as processes, and the operator.",
    )
    local_sub = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    up = local_sub.add_parser(
        "up",
        help="run the local cluster in the foreground until Ctrl-C",
        description="Run the local cluster in the foreground until Ctrl-C, writing a kubeconfig "
        "for kubectl and agentpool into --dir.",
    )
    up.add_argument("--dir", required=True, help="directory for the kubeconfig, lock and pod logs")
    up.add_argument("--port", type=int, default=0, help="API server port (default: any free one)")
    up.add_argument(
        "--no-operator",
        dest="operator",
        action="store_false",
        help="run only the API server and kubelet",
    )
    up.add_argument(
        "--history-seconds",
        type=float,
        help="forget watch events older than this many seconds, as etcd compaction does "
        "(0: never; default: 300)",
    )
    up.add_argument(
        "--history-mib",
        type=float,
        help="MiB of watch events kept per resource (0: no bound; default: 32)",
    )
    up.set_defaults(func=_cmd_local_up)
    return parser


#: The exit status of a tool that a closed pipe ended: 128 + SIGPIPE, as a shell reports it.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    from agentpool.io.connection import NoCluster

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`agentpool results RUN | head`): stop quietly as Unix tools do.
        # Point stdout at /dev/null so the interpreter's last flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except NoCluster as error:
        print(f"agentpool: {error}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    raise SystemExit(main())
