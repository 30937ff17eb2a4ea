"""Loopback addresses for local pods: each pod its own 127.x.y.N, so agents can share a port.

All of 127/8 is loopback on Linux. A kubelet claims a /24 block machine-wide (an flock on a file per
block in the temp directory, released when the kubelet stops or its process dies), so two local
clusters on one machine, say ``agentpool local up`` and a test run, never hand out the same
address. The first cluster gets 127.0.0.2 to .254; more pods, or another cluster, take the next
free block (127.0.1.x, ...). Used by :mod:`agentpool.local.kubelet` and its pod workers.
"""

from __future__ import annotations

import fcntl
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
    """Hands out pod addresses, lowest free first, and takes them back when a pod is removed."""

    def __init__(self, claims: Claims | None = None) -> None:
        self._claims = claims or BlockClaims()
        self._blocks: list[int] = []
        self._used: set[int] = set()

    def allocate(self) -> str:
        index = 0
        while index in self._used:
            index += 1
        while index // len(HOSTS) >= len(self._blocks):
            self._blocks.append(self._claims.claim())
        self._used.add(index)
        return self._address(index)

    def release(self, address: str) -> None:
        for index in list(self._used):
            if self._address(index) == address:
                self._used.discard(index)

    def close(self) -> None:
        """Give the blocks back for other clusters; the pool must hold no address by then."""
        self._claims.release_all()
        self._blocks.clear()
        self._used.clear()

    def __len__(self) -> int:
        return len(self._used)

    def _address(self, index: int) -> str:
        block, host = divmod(index, len(HOSTS))
        number = self._blocks[block]
        return f"127.{number >> 8}.{number & 255}.{HOSTS[host]}"
