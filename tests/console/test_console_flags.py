"""The ``agentpool`` flags mean one thing across subcommands, as kubectl's do.

The tests parse command lines with the real parser, in this process: ``--context`` is the
kubeconfig context in every command that reaches a cluster, the lease's own context is
``--lease-context``, and the old spellings say what to use instead.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import urllib.request
from typing import cast

import pytest

from agentpool import cli

#: A command line of each subcommand that reaches a cluster, without its connection flags.
CLUSTER_COMMANDS = [
    ["run"],
    ["watch", "r"],
    ["results", "r"],
    ["call", "p", "--item", "1"],
    ["cast", "p", "--item", "1"],
    ["lease", "p"],
    ["submit", "p", "-f", "items.jsonl"],
]


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda words: words[0])
def test_context_is_the_kubeconfig_context_everywhere(command: list[str]) -> None:
    """`--context NAME` picks the kubeconfig's context in every command, as in kubectl, and
    `--kubeconfig` its file."""
    args = cli.build_parser().parse_args([*command, "--context", "staging", "--kubeconfig", "/k"])
    assert (args.context, args.kubeconfig) == ("staging", "/k")


def test_the_lease_context_is_json_under_its_own_flag() -> None:
    """`lease --lease-context JSON` is the lease's context, beside the kubeconfig context; text
    that is not JSON is refused with the reason."""
    parser = cli.build_parser()
    args = parser.parse_args(["lease", "p", "--context", "c", "--lease-context", '{"user": 1}'])
    assert (args.context, args.lease_context) == ("c", {"user": 1})


def test_bad_lease_context_says_it_is_not_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["lease", "p", "--lease-context", "{user"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--lease-context: not JSON" in error


def test_kube_context_still_works_for_a_release_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The old `--kube-context` of call, cast and lease still picks the context, and says on
    stderr that it is deprecated and which flag to use."""
    for command in (["call", "p", "--item", "1"], ["lease", "p"]):
        args = cli.build_parser().parse_args([*command, "--kube-context", "old"])
        assert args.context == "old"
        error = capsys.readouterr().err
        assert "--kube-context is deprecated" in error
        assert "use --context" in error


def test_json_given_to_lease_as_context_points_at_lease_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`lease --context '{...}'`, the lease context's old spelling, fails at once (exit 2) with
    a line that says --context is now the kubeconfig's and names the flag to use, rather than
    a kubeconfig error about a context called '{...}'."""
    assert cli.main(["lease", "p", "--context", '{"user": "ada"}']) == 2
    error = capsys.readouterr().err
    assert error == (
        "agentpool: --context names the kubeconfig context, as in kubectl; "
        """give the lease's context as --lease-context '{"user": "ada"}'\n"""
    )


def test_deprecated_spellings_are_hidden_from_help() -> None:
    """--help shows only the current spellings."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "--kube-context" not in sub.choices["lease"].format_help()


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("agentpool",)
) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command and subcommand of ``parser``, by its full name."""
    found = [(" ".join(path), parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _commands(child, (*path, name))
    return found


COMMANDS = _commands(cli.build_parser())
#: Words in a flag's name that make it a length of time.
DURATION_WORDS = ("timeout", "ttl", "seconds", "interval", "period", "deadline", "delay")
UNITS = ("second", "minute", "millisecond")


@pytest.mark.parametrize(("name", "parser"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_command_says_what_it_does_in_its_help(
    name: str, parser: argparse.ArgumentParser
) -> None:
    """`agentpool COMMAND --help` opens with a description of the command, a sentence."""
    assert parser.description, f"`{name} --help` has no description"
    assert parser.description.rstrip().endswith("."), parser.description


@pytest.mark.parametrize(("name", "parser"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_flag_has_help_and_every_duration_names_its_unit(
    name: str, parser: argparse.ArgumentParser
) -> None:
    """Every flag of every command says what it is; a flag that takes a length of time (a
    timeout, a ttl) says in which unit, so `--timeout 5` is never a guess."""
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        flag = max(action.option_strings, key=len)
        assert action.help, f"{name} {flag} has no help"
        if action.nargs == 0:
            continue  # a switch, which takes no value
        if any(word in flag for word in DURATION_WORDS):
            assert any(unit in action.help for unit in UNITS), (
                f"{name} {flag}: its help names no unit: {action.help!r}"
            )


def _answers(host: str, port: int) -> bool:
    """Whether an HTTP GET of /metrics at host:port answers 200."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_metrics_host_binds_the_metrics_endpoint_to_one_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run --metrics-host 127.0.0.2 --metrics-port P` serves /metrics on that address only
    (127.0.0.1, another address of the same machine, refuses), and stops serving when the
    operator stops."""
    from agentpool.handlers import operator

    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    seen: dict[str, bool] = {}

    async def run_operator(*_: object, **__: object) -> None:
        seen["127.0.0.2"] = await asyncio.to_thread(_answers, "127.0.0.2", port)
        seen["127.0.0.1"] = await asyncio.to_thread(_answers, "127.0.0.1", port)

    monkeypatch.setattr(operator, "run_operator", run_operator)
    argv = ["run", "--server", "https://127.0.0.1:1", "--metrics-port", str(port)]
    assert cli.main([*argv, "--metrics-host", "127.0.0.2"]) == 0
    assert seen == {"127.0.0.2": True, "127.0.0.1": False}
    assert not _answers("127.0.0.2", port)


def test_metrics_host_defaults_to_every_address() -> None:
    """Without --metrics-host the endpoint listens on every IPv4 address, as it always has, so
    a Service or a Prometheus scrape in the cluster reaches it."""
    args = cli.build_parser().parse_args(["run"])
    assert args.metrics_host == "0.0.0.0"


def test_priority_sets_the_replicas_rank_in_its_peering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run --peering NAME --priority N` ranks the replica N among its peers; without
    `--priority` each replica draws its own."""
    from agentpool.handlers import operator

    passed: list[tuple[object, object]] = []

    async def run_operator(*_: object, **options: object) -> None:
        peering = cast(operator.Peering, options["peering"])
        passed.append((peering.name, peering.priority))

    monkeypatch.setattr(operator, "run_operator", run_operator)
    argv = ["run", "--server", "https://127.0.0.1:1", "--peering", "agentpool"]
    assert cli.main([*argv, "--priority", "7"]) == 0
    assert passed == [("agentpool", 7)]
    for _ in range(3):
        assert cli.main(argv) == 0
    drawn = {priority for _, priority in passed[1:]}
    assert len(drawn) == 3  # a collision is 3 in 2**31
    assert min(drawn) >= 1


def test_priority_without_peering_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A priority ranks a replica among peers: alone, `--priority` is refused before anything
    starts, with what to add."""
    from agentpool.handlers import operator

    started: list[object] = []

    async def run_operator(*args: object, **_: object) -> None:
        started.append(args)

    monkeypatch.setattr(operator, "run_operator", run_operator)
    assert cli.main(["run", "--server", "https://127.0.0.1:1", "--priority", "7"]) == 2
    assert "--priority needs --peering NAME" in capsys.readouterr().err
    assert started == []
