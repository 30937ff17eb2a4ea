"""The bearer token is read from its header as RFC 9110 has it: the scheme in any case, the
token trimmed, any other scheme no token at all."""

from __future__ import annotations

import pytest

from agentpool.wire.tokens import bearer_token


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", b"abc"),
        ("bearer  abc ", b"abc"),
        ("BEARER abc", b"abc"),
        ("Basic abc", None),
        ("", None),
        ("abc", None),
    ],
)
def test_bearer_tokens_are_read_from_the_header(header: str, token: bytes | None) -> None:
    assert bearer_token(header) == token
