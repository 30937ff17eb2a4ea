"""The binding rules on their own: which /bind bodies are taken, and when a lease token opens
the agent, read against a clock the test sets."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.agent.binding import (
    Binder,
    Binding,
    BindRequest,
    parse_bind,
    parse_time,
    parse_unbind,
)

T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
POOL_TOKEN = b"pool-token"


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def bind_body(
    lease: str = "chat-1", *, token: str = "lease-token", expires: datetime = T0
) -> bytes:
    body = {"lease": lease, "token": token, "expireTime": rfc3339(expires), "context": {"u": 1}}
    return json.dumps(body).encode()


def request(lease: str = "chat-1", *, token: str = "lease-token", expires: datetime) -> BindRequest:
    parsed = parse_bind(bind_body(lease, token=token, expires=expires))
    assert isinstance(parsed, BindRequest), parsed
    return parsed


def test_a_bind_body_is_parsed_into_its_binding() -> None:
    """The lease, its context and its expiry (as written and as a time) come through intact."""
    body = {
        "lease": "chat-1",
        "token": "t0k3n",
        "expireTime": "2030-01-02T03:04:05.123456789Z",
        "context": {"user": "ada", "tools": ["search", None]},
    }
    parsed = parse_bind(json.dumps(body).encode())
    assert isinstance(parsed, BindRequest)
    assert parsed.binding == Binding(
        lease="chat-1",
        context={"user": "ada", "tools": ["search", None]},
        expire_time="2030-01-02T03:04:05.123456789Z",
    )
    assert parsed.token == b"t0k3n"
    assert parsed.expires == datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert "t0k3n" not in repr(parsed)


def test_a_bind_body_without_a_context_binds_with_none() -> None:
    parsed = parse_bind(b'{"lease": "l", "token": "t", "expireTime": "2030-01-01T00:00:00Z"}')
    assert isinstance(parsed, BindRequest)
    assert parsed.binding.context is None


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"{not json", "not JSON"),
        (b'["lease"]', "JSON object"),
        (b"null", "JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'{"token": "t", "expireTime": "2030-01-01T00:00:00Z"}', "'lease'"),
        (b'{"lease": "", "token": "t", "expireTime": "2030-01-01T00:00:00Z"}', "'lease'"),
        (b'{"lease": 7, "token": "t", "expireTime": "2030-01-01T00:00:00Z"}', "'lease'"),
        (b'{"lease": "l", "expireTime": "2030-01-01T00:00:00Z"}', "'token'"),
        (b'{"lease": "l", "token": "", "expireTime": "2030-01-01T00:00:00Z"}', "'token'"),
        (b'{"lease": "l", "token": "a b", "expireTime": "2030-01-01T00:00:00Z"}', "'token'"),
        (b'{"lease": "l", "token": "caf\\u00e9", "expireTime": "2030-01-01T00:00:00Z"}', "'token'"),
        (b'{"lease": "l", "token": ["t"], "expireTime": "2030-01-01T00:00:00Z"}', "'token'"),
        (b'{"lease": "l", "token": "t"}', "'expireTime'"),
        (b'{"lease": "l", "token": "t", "expireTime": 1893456000}', "'expireTime'"),
        (b'{"lease": "l", "token": "t", "expireTime": "tomorrow"}', "'expireTime'"),
        (b'{"lease": "l", "token": "t", "expireTime": "2030-01-01T00:00:00"}', "'expireTime'"),
        (
            b'{"lease": "l", "token": "t", "expireTime": "2030-01-01T00:00:00Z", "context": NaN}',
            "not JSON",
        ),
    ],
)
def test_malformed_bind_bodies_say_what_is_wrong(body: bytes, names: str) -> None:
    """Each refusal is a sentence naming the field at fault, never an exception."""
    parsed = parse_bind(body)
    assert isinstance(parsed, str)
    assert names in parsed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-02T03:04:05Z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02t03:04:05z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05.5Z", datetime(2030, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        ("2030-01-02T05:04:05+02:00", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-01T23:04:05-04:00", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02", None),  # a date is not a time
        ("2030-01-02T03:04:05", None),  # a time with no offset is nobody's time
        ("2030-01-02 03:04:05Z", None),
        ("20300102T030405Z", None),  # ISO 8601's basic format is not RFC 3339
        ("2030-13-02T03:04:05Z", None),
        ("2030-01-02T24:04:05Z", None),
        ("2030-01-02T03:04:60Z", None),
        ("0000-01-02T03:04:05Z", None),
        ("2030-01-02T03:04:05+24:00", None),
        ("٢٠٣٠-01-02T03:04:05Z", None),  # digits, but not ASCII ones
    ],
)
def test_expire_times_are_rfc3339(text: str, expected: datetime | None) -> None:
    assert parse_time(text) == expected


def test_an_unbind_body_names_its_lease() -> None:
    parsed = parse_unbind(b'{"lease": "chat-1"}')
    assert not isinstance(parsed, str)
    assert parsed.lease == "chat-1"
    for body in (b"", b"{}", b'{"lease": ""}', b'{"lease": null}', b"[1]"):
        assert isinstance(parse_unbind(body), str), body


@given(st.binary())
def test_no_bytes_make_the_bind_parser_raise(raw: bytes) -> None:
    """Whatever arrives as a /bind or /unbind body is parsed or refused in a sentence."""
    assert isinstance(parse_bind(raw), BindRequest | str)
    parse_unbind(raw)


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(), st.lists, max_leaves=8))
def test_no_json_value_in_a_field_makes_the_bind_parser_raise(value: object) -> None:
    for field in ("lease", "token", "expireTime", "context"):
        body = json.loads(bind_body())
        body[field] = value
        assert isinstance(parse_bind(json.dumps(body).encode()), BindRequest | str)


# What a lease token opens, moment by moment: (seconds after T0, token presented, accepted).
ACCEPTS = [
    (-3600, b"lease-token", True),
    (59, b"lease-token", True),
    (60, b"lease-token", False),  # the expiry itself is past it
    (61, b"lease-token", False),
    (0, b"lease-token-", False),
    (0, b"lease-toke", False),
    (0, b"", False),
    (0, POOL_TOKEN, False),  # the binder knows lease tokens only; the pool's is the server's
]


@pytest.mark.parametrize(("after", "token", "accepted"), ACCEPTS)
def test_a_lease_token_opens_the_agent_until_its_expiry(
    after: int, token: bytes, accepted: bool
) -> None:
    binder = Binder()
    binder.bind(request(expires=T0 + timedelta(seconds=60)))
    assert binder.accepts(token, T0 + timedelta(seconds=after)) is accepted


def test_an_unbound_agent_accepts_no_lease_token() -> None:
    binder = Binder()
    assert binder.binding is None
    assert not binder.accepts(b"lease-token", T0)
    binder.bind(request(expires=T0 + timedelta(hours=1)))
    assert binder.unbind() == Binding("chat-1", {"u": 1}, rfc3339(T0 + timedelta(hours=1)))
    assert binder.binding is None
    assert not binder.accepts(b"lease-token", T0)
    assert binder.unbind() is None


def test_a_renewal_moves_the_expiry_and_keeps_the_first_token_and_context() -> None:
    """Renewed at 50s to 120s, the lease token still opens the agent at 90s, where it would not
    have, and no longer at 120s; the renewal's own token and context are not taken."""
    binder = Binder()
    binder.bind(request(expires=T0 + timedelta(seconds=60)))
    renewal = json.loads(bind_body(expires=T0 + timedelta(seconds=120)))
    renewal.update(token="another-token", context={"u": 2})
    parsed = parse_bind(json.dumps(renewal).encode())
    assert isinstance(parsed, BindRequest)
    assert binder.accepts(b"lease-token", T0 + timedelta(seconds=50))
    renewed = binder.renew(parsed)
    assert renewed == Binding("chat-1", {"u": 1}, rfc3339(T0 + timedelta(seconds=120)))
    assert binder.binding == renewed
    assert binder.accepts(b"lease-token", T0 + timedelta(seconds=90))
    assert not binder.accepts(b"another-token", T0 + timedelta(seconds=90))
    assert not binder.accepts(b"lease-token", T0 + timedelta(seconds=120))


def test_the_binder_binds_one_lease_at_a_time() -> None:
    binder = Binder()
    binder.bind(request("chat-1", expires=T0))
    assert binder.holds("chat-1")
    assert not binder.holds("chat-2")
    with pytest.raises(RuntimeError, match="already bound"):
        binder.bind(request("chat-2", expires=T0))
    with pytest.raises(RuntimeError, match="not bound"):
        binder.renew(request("chat-2", expires=T0))
