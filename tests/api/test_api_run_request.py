"""spec.request on a PoolRun: how an item becomes a request to an HTTP pool's agent. Its method,
path and headers are refused at apply when they would break the request (a path without its /,
a connection's own header, Authorization or Host, a Cast), checked on the committed schema with
the validator the local API server uses, and on the model the operator parses, which must agree.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentpool.api import PoolRunSpec
from agentpool.api.runs import CAST_REQUEST_MESSAGE, REFUSED_HEADERS, REFUSED_HEADERS_MESSAGE
from agentpool.local.apiserver.schema.structural import apply_defaults
from agentpool.local.apiserver.schema.validation import validate

BASE = {"poolRef": {"name": "chat"}, "source": {"items": [{"n": 1}]}}


def _errors(schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    obj = apply_defaults(schema, {"metadata": {"name": "r"}, "spec": {**BASE, **spec}})
    return [str(error) for error in validate(schema, obj)]


SPECS: list[tuple[dict[str, Any], str | None]] = [
    ({}, None),
    ({"request": {"path": "/v1/chat/completions"}}, None),
    ({"request": {"method": "PUT", "path": "/items?x=1"}}, None),
    ({"request": {"path": "/", "headers": {"X-Api-Version": "2", "Accept": "*/*"}}}, None),
    ({"request": {"path": "/", "headers": {"Content-Type": "application/vnd.x+json"}}}, None),
    ({"request": {"path": "/"}, "mode": "Call"}, None),
    ({"request": {}}, "path"),
    ({"request": {"path": "v1/chat"}}, "path"),
    ({"request": {"path": "/a b"}}, "path"),
    ({"request": {"method": "CONNECT", "path": "/"}}, "method"),
    ({"request": {"path": "/", "headers": {"X-A": "a\r\nHost: b"}}}, "headers"),
    ({"request": {"path": "/", "headers": {"Host": "other"}}}, REFUSED_HEADERS_MESSAGE),
    ({"request": {"path": "/", "headers": {"authorization": "Bearer t"}}}, REFUSED_HEADERS_MESSAGE),
    ({"request": {"path": "/", "headers": {"Connection": "close"}}}, REFUSED_HEADERS_MESSAGE),
    ({"request": {"path": "/", "headers": {"TE": "trailers"}}}, REFUSED_HEADERS_MESSAGE),
    ({"request": {"path": "/", "headers": {"Content-Length": "9"}}}, REFUSED_HEADERS_MESSAGE),
    (
        {"request": {"path": "/", "headers": {"Transfer-Encoding": "chunked"}}},
        REFUSED_HEADERS_MESSAGE,
    ),
    ({"request": {"path": "/"}, "mode": "Cast"}, CAST_REQUEST_MESSAGE),
]


@pytest.mark.parametrize(("spec", "refusal"), SPECS)
def test_api_server_refuses_requests_that_would_break(
    schemas: dict[str, dict[str, Any]], spec: dict[str, Any], refusal: str | None
) -> None:
    """What the API server accepts, and that a refusal names the field or says the fix."""
    errors = _errors(schemas["PoolRun"], spec)
    if refusal is None:
        assert errors == []
    else:
        assert any(refusal in error for error in errors), errors


@pytest.mark.parametrize(("spec", "refusal"), SPECS)
def test_model_agrees_with_the_api_server(spec: dict[str, Any], refusal: str | None) -> None:
    """The operator's parse accepts and refuses the same specs as the API server."""
    if refusal is None:
        PoolRunSpec.model_validate({**BASE, **spec})
        return
    with pytest.raises(ValidationError) as raised:
        PoolRunSpec.model_validate({**BASE, **spec})
    assert refusal in str(raised.value)


@pytest.mark.parametrize("name", [*REFUSED_HEADERS, "hOsT", "Keep-alive", "PROXY-authorization"])
def test_operator_refuses_each_refused_header_in_any_case(name: str) -> None:
    """The API server's rule knows the usual spellings; the operator's parse refuses every one,
    so a run that slips past the rule fails at once with InvalidSpec rather than at its agents."""
    with pytest.raises(ValidationError, match="may not set"):
        PoolRunSpec.model_validate({**BASE, "request": {"path": "/", "headers": {name: "x"}}})


def test_operator_refuses_a_header_name_that_is_not_a_token() -> None:
    """A name HTTP cannot carry is refused at parse, never sent to an agent."""
    with pytest.raises(ValidationError, match="not a header name"):
        PoolRunSpec.model_validate({**BASE, "request": {"path": "/", "headers": {"X A": "1"}}})


def test_request_defaults_to_post_and_cannot_change(schemas: dict[str, dict[str, Any]]) -> None:
    """POST is the default method, in the CRD and the model alike; the request is read once,
    when the run starts, so changing it later is refused like the other fixed fields."""
    spec = PoolRunSpec.model_validate({**BASE, "request": {"path": "/"}})
    assert spec.request is not None
    assert spec.request.method == "POST"
    schema = schemas["PoolRun"]
    old = apply_defaults(
        schema, {"metadata": {"name": "r"}, "spec": {**BASE, "request": {"path": "/a"}}}
    )
    new = apply_defaults(
        schema, {"metadata": {"name": "r"}, "spec": {**BASE, "request": {"path": "/b"}}}
    )
    assert old["spec"]["request"]["method"] == "POST"
    errors = [str(error) for error in validate(schema, new, old=old)]
    assert any("spec.request cannot change" in error for error in errors), errors
