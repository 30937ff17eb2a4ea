"""Loopback addresses for local pods: each pod its own 127.x.y.N, so agents can share a port.

All of 127/8 is loopback on Linux. A kubelet claims a /24 block machine-wide (an flock on a file per
block in the temp directory, released when the kubelet stops or its process dies), so two local
clusters on one machine, say ``agentpool local up`` and a test run, never hand out the same
address. The first cluster gets 127.0.0.2 to .254; more pods, or another cluster, take the next
free block (127.0.1.x, ...). Used by :mod:`agentpool.local.kubelet` and its pod workers.
"""

from __future__ import annotations

import fcntl
import heapq
import tempfile
from pathlib import Path
from typing import IO, Protocol

HOSTS = range(2, 255)  # .1 of block 0 is the node itself (hostIP); .0 and .255 are never used
BLOCKS = 256 * 256


class Claims(Protocol):
    def claim(self) -> int: ...

    def release_all(self) -> None: ...


class BlockClaims:
    """Machine-wide claims on /24 blocks of 127/8, held as flocks on files under directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(tempfile.gettempdir()) / "agentpool-loopback"
        self._held: dict[int, IO[str]] = {}

    def claim(self) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        for block in range(BLOCKS):
            if block in self._held:
                continue
            handle = (self.directory / f"{block}.lock").open("a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self._held[block] = handle
            return block
        raise RuntimeError("every loopback block is claimed by another local cluster")

    def release_all(self) -> None:
        for handle in self._held.values():
            handle.close()
        self._held.clear()


class AddressPool:
    """Hands out pod addresses, lowest free first, and takes them back when a pod is removed.

    Both take constant time whatever the number of pods (a simulated node holds thousands): the
    indices below the highest ever handed out that are free again wait in a heap.
    """

    def __init__(self, claims: Claims | None = None) -> None:
        self._claims = claims or BlockClaims()
        self._blocks: list[int] = []
        self._used: dict[str, int] = {}
        self._freed: list[int] = []
        self._next = 0

    def allocate(self) -> str:
        if self._freed:
            index = heapq.heappop(self._freed)
        else:
            index, self._next = self._next, self._next + 1
        while index // len(HOSTS) >= len(self._blocks):
            self._blocks.append(self._claims.claim())
        address = self._address(index)
        self._used[address] = index
        return address

    def release(self, address: str) -> None:
        index = self._used.pop(address, None)
        if index is not None:
            heapq.heappush(self._freed, index)

    def close(self) -> None:
        """Give the blocks back for other clusters; the pool must hold no address by then."""
        self._claims.release_all()
        self._blocks.clear()
        self._used.clear()
        self._freed.clear()
        self._next = 0

    def __len__(self) -> int:
        return len(self._used)

    def _address(self, index: int) -> str:
        block, host = divmod(index, len(HOSTS))
        number = self._blocks[block]
        return f"127.{number >> 8}.{number & 255}.{HOSTS[host]}"
