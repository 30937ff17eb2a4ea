"""spec.protocol on an AgentPool: Agentpool by default, HTTP for any HTTP/1.1 server taken as it
is, and the fields that need the agent protocol refused on an HTTP pool with a message that says
how to fix it. Checked on the committed schema with the validator the local API server uses,
and on the model the operator parses, which must agree."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentpool.api import AgentPoolSpec
from agentpool.api.pools import RESET_ON_HTTP_MESSAGE
from agentpool.local.apiserver.schema.structural import apply_defaults
from agentpool.local.apiserver.schema.validation import validate


def _errors(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    obj = apply_defaults(schema, {"metadata": {"name": "p"}, "spec": {"image": "a:1", **spec}})
    return [str(error) for error in validate(schema, obj)]


SPECS: list[tuple[dict[str, Any], str | None]] = [
    ({}, None),
    ({"protocol": "Agentpool"}, None),
    ({"protocol": "HTTP"}, None),
    ({"protocol": "HTTP", "slots": 8, "maxUses": 10}, None),
    ({"protocol": "HTTP", "resetBetweenItems": False}, None),
    ({"protocol": "Agentpool", "resetBetweenItems": True}, None),
    ({"resetBetweenItems": True}, None),
    ({"protocol": "HTTP", "resetBetweenItems": True}, "turn resetBetweenItems off"),
    ({"protocol": "HTTP", "sessions": {"header": "Mcp-Session-Id"}}, None),
    ({"protocol": "HTTP", "sessions": {"header": "X-S", "idleTimeoutSeconds": 30}}, None),
    ({"sessions": {"header": "Mcp-Session-Id"}}, "set protocol to HTTP"),
    ({"protocol": "HTTP", "sessions": {"header": "Bad Header"}}, "spec.sessions.header"),
    ({"protocol": "HTTP", "sessions": {"header": "X", "idleTimeoutSeconds": 0}}, "spec.sessions"),
    ({"protocol": "Http"}, "spec.protocol"),
    ({"protocol": "gRPC"}, "spec.protocol"),
]


@pytest.mark.parametrize(("spec", "refusal"), SPECS)
def test_api_server_refuses_native_fields_on_http_pools(
    schemas: dict[str, dict[str, Any]], spec: dict[str, Any], refusal: str | None
) -> None:
    """What the API server accepts, and that a refusal names the field or the fix."""
    errors = _errors(schemas["AgentPool"], spec)
    if refusal is None:
        assert errors == []
    else:
        assert any(refusal in error for error in errors), errors


@pytest.mark.parametrize(("spec", "refusal"), SPECS)
def test_model_agrees_with_the_api_server(spec: dict[str, Any], refusal: str | None) -> None:
    """The operator's parse accepts and refuses the same specs as the API server."""
    if refusal is None:
        AgentPoolSpec.model_validate(spec)
        return
    with pytest.raises(ValidationError) as raised:
        AgentPoolSpec.model_validate(spec)
    assert (
        "protocol" in str(raised.value)
        or "sessions" in str(raised.value)
        or (refusal in str(raised.value))
    )


def test_reset_refusal_names_the_field_and_both_fixes(schemas: dict[str, dict[str, Any]]) -> None:
    """The API server points at resetBetweenItems and offers both ways out, in the model's words."""
    (error,) = _errors(schemas["AgentPool"], {"protocol": "HTTP", "resetBetweenItems": True})
    assert "spec.resetBetweenItems" in error
    assert RESET_ON_HTTP_MESSAGE in error
    assert "set protocol to Agentpool" in RESET_ON_HTTP_MESSAGE
    with pytest.raises(ValidationError, match="turn resetBetweenItems off"):
        AgentPoolSpec.model_validate({"protocol": "HTTP", "resetBetweenItems": True})


@pytest.mark.parametrize(
    ("protocol", "speaks"),
    [("Agentpool", True), ("HTTP", False)],
)
def test_only_agentpool_pools_speak_the_protocol(protocol: str, speaks: bool) -> None:
    """The one place the handlers read whether they may talk to a pool's agents."""
    assert AgentPoolSpec.model_validate({"protocol": protocol}).speaks_protocol is speaks
    assert AgentPoolSpec().protocol == "Agentpool"


@pytest.mark.parametrize(
    ("spec", "handler"),
    [
        ({}, {"httpGet": {"path": "/healthz", "port": 8080}}),
        ({"protocol": "HTTP"}, {"tcpSocket": {"port": 8080}}),
        ({"protocol": "HTTP", "port": 9000}, {"tcpSocket": {"port": 9000}}),
        (
            {"protocol": "HTTP", "readinessProbe": {"periodSeconds": 5}},
            {"tcpSocket": {"port": 8080}, "periodSeconds": 5},
        ),
        (
            {"protocol": "HTTP", "readinessProbe": {"httpGet": {"path": "/up"}}},
            {"httpGet": {"path": "/up", "port": 8080}},
        ),
    ],
)
def test_http_pools_are_probed_by_tcp_unless_told(
    spec: dict[str, Any], handler: dict[str, Any]
) -> None:
    """An HTTP pool's server may serve no /healthz: with no handler given, its agents are probed
    by a TCP connection to the pool's port; a handler the spec gives is kept."""
    probe = AgentPoolSpec.model_validate(spec).effective_readiness_probe()
    given = probe.model_dump(by_alias=True, mode="json", exclude_unset=True)
    assert {key: given[key] for key in handler} == handler
    assert sum(key in given for key in ("httpGet", "tcpSocket", "exec")) == 1
