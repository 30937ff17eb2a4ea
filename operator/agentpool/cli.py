"""The ``agentpool`` command line: the entry point users and the operator image run.

Each subcommand parses its arguments here and hands off to the module that does the work, imported
lazily so that ``agentpool crds`` does not pay for kopf and ``agentpool run`` does not pay for the
local cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_crds(args: argparse.Namespace) -> int:
    from agentpool.api.crds import render_crds

    out = Path(args.out)
    rendered = render_crds()
    if args.check:
        stale = []
        for filename, text in rendered.items():
            path = out / filename
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        if stale:
            for path in stale:
                print(
                    f"{path} differs from what the models in agentpool.api generate; "
                    "run `agentpool crds` to regenerate it",
                    file=sys.stderr,
                )
            return 1
        print(f"{len(rendered)} CRDs in {out} match the models")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for filename, text in rendered.items():
        (out / filename).write_text(text)
        print(f"wrote {out / filename}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentpool",
        description="Keep pools of warm agents on Kubernetes and drive work items through them.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    crds = sub.add_parser("crds", help="write the CRDs generated from the API models")
    crds.add_argument("--out", default="crds", help="directory to write into (default: crds)")
    crds.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1, naming each file, if the files differ from the models",
    )
    crds.set_defaults(func=_cmd_crds)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
