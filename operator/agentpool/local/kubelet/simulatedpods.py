"""A simulated pod on the local kubelet: bound, addressed, Running and Ready, with no process.

Like kwok's, a :class:`SimulatedPod` has everything of a pod but its container: it is bound to the
node, gets its own loopback address, resolves its environment as a container's (so the pool's
token reaches it from the Secret its ``AGENTPOOL_TOKEN`` refers to) and is served by the kubelet's
one in-process agent (:mod:`agentpool.local.kubelet.simulator`) on that address and the pod's
port. Its readiness probe runs, answered by that agent, until it first succeeds; from then on the
pod is Ready until it is deleted, since probing 10,000 pods every few seconds would cost the
benchmark more than what it measures. Deletion lets an item in hand finish within the grace
period, then drops the agent and the pod. The kubelet makes one instead of a
:class:`~agentpool.local.kubelet.podworker.PodWorker` when it runs simulated.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from agentpool.local.kubelet import probes
from agentpool.local.kubelet.podstatus import Running, Terminated
from agentpool.local.kubelet.podworker import Host, PodWorker, now
from agentpool.local.kubelet.simulator import SimulatedAgent, Simulator
from agentpool.wire import protocol

logger = logging.getLogger(__name__)


class SimulatedHost(Host, Protocol):
    """A kubelet that serves its pods from one in-process agent."""

    @property
    def simulator(self) -> Simulator: ...


def agent_port(container: Mapping[str, Any], env: Mapping[str, str]) -> int:
    """Where the pod's agent listens: ``AGENT_PORT``, else its first declared port, else the
    protocol's default."""
    given = env.get(protocol.PORT_ENV, "")
    if given.isdigit():
        return int(given)
    for declared in container.get("ports") or []:
        if isinstance(declared, Mapping) and isinstance(declared.get("containerPort"), int):
            return int(declared["containerPort"])
    return protocol.DEFAULT_PORT


class SimulatedPod(PodWorker):
    def __init__(self, host: SimulatedHost, pod: Mapping[str, Any]) -> None:
        super().__init__(host, pod)
        self.simulator = host.simulator
        self.agent: SimulatedAgent | None = None

    async def kill(self, grace: float) -> None:
        if self.agent is not None:
            await self.simulator.remove(self.agent, 0)
            self.agent = None

    async def _live(self) -> None:
        if not await self._bind():
            return
        self.ip = self.host.addresses.allocate()
        self._publish(pod_ip=self.ip, start_time=now())
        env = await self._resolve_env(self.ip)
        if env is None:
            return
        started = now()
        try:
            self.agent = await self.simulator.serve(
                self.ip, agent_port(self.container, env), env.get(protocol.TOKEN_ENV, "")
            )
        except OSError as error:
            failed = Terminated(128, "StartError", started, now(), message=str(error))
            self._publish(state=failed, phase="Failed", ready=False)
            await self.deleting.wait()
            return
        self._publish(
            state=Running(started),
            phase="Running",
            ready=False,
            container_id=f"simulated://{self.uid}",
        )
        try:
            await self._first_ready(env, Path(self.container.get("workingDir") or self.host.cwd))
            await self.deleting.wait()
        finally:
            agent, self.agent = self.agent, None
            if agent is not None:
                await self.simulator.remove(agent, self._grace())
            self._publish(ready=False)

    async def _first_ready(self, env: Mapping[str, str], cwd: Path) -> None:
        """Probe readiness on the probe's schedule until it first passes, then publish Ready."""
        raw = self.container.get("readinessProbe")
        if raw:
            spec = probes.ProbeSpec.parse(raw)
            attempt = functools.partial(self._attempt, spec, env, cwd)
            probing = asyncio.ensure_future(
                probes.probe_on_schedule(spec, attempt, bool, initial=False)
            )
            deleting = asyncio.ensure_future(self.deleting.wait())
            try:
                await asyncio.wait({probing, deleting}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                probing.cancel()
                deleting.cancel()
        if not self.deleting.is_set():
            self._publish(ready=True)
