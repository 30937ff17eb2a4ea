"""Lets ``python -m agentpool`` behave like the ``agentpool`` command."""

from agentpool.cli import main

raise SystemExit(main())
