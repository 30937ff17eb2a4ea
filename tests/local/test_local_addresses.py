"""Pod loopback addresses: per-pod, reused after delete, and never shared by two clusters."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentpool.local.kubelet.addresses import AddressPool, BlockClaims


class Counting:
    """Claims blocks 0, 1, 2, ... as if this cluster were alone on the machine."""

    def __init__(self) -> None:
        self.next = 0

    def claim(self) -> int:
        self.next += 1
        return self.next - 1

    def release_all(self) -> None:
        self.next = 0


def test_addresses_start_at_two_and_are_reused() -> None:
    """Pods get 127.0.0.2, .3, ...; a released address is handed out again first."""
    pool = AddressPool(Counting())
    assert [pool.allocate() for _ in range(3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    pool.release("127.0.0.3")
    assert pool.allocate() == "127.0.0.3"
    assert len(pool) == 3


def test_past_one_block_the_next_is_claimed() -> None:
    """The 254th pod gets the first address of the next /24; host parts stay within 2..254."""
    pool = AddressPool(Counting())
    addresses = [pool.allocate() for _ in range(260)]
    assert addresses[252] == "127.0.0.254"
    assert addresses[253] == "127.0.1.2"
    assert len(set(addresses)) == 260


def test_two_clusters_never_share_a_block(tmp_path: Path) -> None:
    """A second pool on the same machine claims another block until the first one closes."""
    first, second = AddressPool(BlockClaims(tmp_path)), AddressPool(BlockClaims(tmp_path))
    assert first.allocate() == "127.0.0.2"
    assert second.allocate() == "127.0.1.2"
    first.release("127.0.0.2")
    first.close()
    third = AddressPool(BlockClaims(tmp_path))
    assert third.allocate() == "127.0.0.2"
    second.close()
    third.close()


@given(st.lists(st.integers(min_value=-1, max_value=600), max_size=400))
def test_the_lowest_free_address_is_always_the_next(steps: list[int]) -> None:
    """Whatever the order of allocations and releases (-1 allocates, n releases the n-th address
    handed out so far, twice or not at all), the next pod gets the lowest free address and no
    two pods ever hold the same one."""
    pool = AddressPool(Counting())
    handed: list[str] = []
    held: set[str] = set()
    order = [f"127.0.{block}.{host}" for block in range(4) for host in range(2, 255)]
    for step in steps:
        if step < 0:
            address = pool.allocate()
            assert address == next(a for a in order if a not in held)
            held.add(address)
            handed.append(address)
        elif step < len(handed):
            pool.release(handed[step])
            held.discard(handed[step])
        assert len(pool) == len(held)
