"""Service-account tokens: TokenRequest and ``kubectl create token`` issue them, TokenReview and
every request check them, as kube-apiserver v1.37 does.

A token is a JWT signed RS256 by the cluster's key, with the claims a real server writes; it
authenticates its account (in the service-account groups and ``system:authenticated``) only for
its audiences, within its times, while the account (with the same uid) and any pod it is bound
to still exist. Each refusal carries the real authenticator's error. Runs on the local server and,
with ``--kubeconfig``, on a real one; the tests that sign tokens by hand need the cluster's
signing key beside its kubeconfig and skip without it.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from accounts import (
    ISSUER,
    call,
    create_account,
    delete_account,
    issue,
    key_id,
    parts,
    review,
    sign,
    token_request,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentpool.local.apiserver.auth.identities import GO_SPACE
from agentpool.local.kubeconfig import ApiAccess
from conftest import Cluster, Kubectl, eventually

INVALID = "invalid bearer token"


@pytest.fixture(scope="module")
def access(cluster: Cluster) -> ApiAccess:
    return cluster.access


@pytest.fixture(scope="module")
def signing_key(cluster: Cluster) -> rsa.RSAPrivateKey:
    """The cluster's service-account signing key, where the local cluster and the suite's real
    control plane keep it."""
    path = Path(cluster.kubeconfig).parent / "pki" / "sa.key"
    if not path.is_file():
        pytest.skip(f"no service-account signing key at {path}")
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


@pytest.fixture
def account(access: ApiAccess, namespace: str) -> tuple[str, str]:
    """A ServiceAccount of the test's namespace: its name and uid."""
    return "worker", create_account(access, namespace, "worker")


def _rejected(error: str) -> dict[str, Any]:
    return {"user": {}, "error": f"[{INVALID}, {error}]" if error else INVALID}


def test_token_request_issues_a_token_with_the_real_claims(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """POST serviceaccounts/NAME/token answers 201 with a TokenRequest holding an RS256 JWT whose
    claims are the real server's, good for the default hour."""
    name, uid = account
    answer = token_request(access, namespace, name)
    assert answer.status == 201, answer.body
    body = answer.body
    assert (body["kind"], body["apiVersion"]) == ("TokenRequest", "authentication.k8s.io/v1")
    assert {k: body["metadata"][k] for k in ("name", "namespace", "uid")} == {
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }
    assert body["spec"] == {
        "audiences": [ISSUER],
        "expirationSeconds": 3600,
        "boundObjectRef": None,
    }
    header, claims = parts(body["status"]["token"])
    assert header["alg"] == "RS256"
    assert header["kid"]
    assert set(claims) == {"aud", "exp", "iat", "iss", "jti", "kubernetes.io", "nbf", "sub"}
    assert claims["aud"] == [ISSUER]
    assert claims["iss"] == ISSUER
    assert claims["sub"] == f"system:serviceaccount:{namespace}:{name}"
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["nbf"] == claims["iat"]
    assert claims["kubernetes.io"] == {
        "namespace": namespace,
        "serviceaccount": {"name": name, "uid": uid},
    }
    expires = datetime.fromisoformat(body["status"]["expirationTimestamp"].replace("Z", "+00:00"))
    assert abs(expires.timestamp() - claims["exp"]) <= 1


def test_token_request_takes_audiences_and_a_duration(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """``spec.audiences`` and ``spec.expirationSeconds`` are written into the token."""
    token = issue(access, namespace, account[0], audiences=["gateway"], expirationSeconds=700)
    _, claims = parts(token)
    assert claims["aud"] == ["gateway"]
    assert claims["exp"] - claims["iat"] == 700


@pytest.mark.parametrize(
    ("seconds", "why"),
    [
        (599, "may not specify a duration less than 10 minutes"),
        (0, "may not specify a duration less than 10 minutes"),
        (2**32 + 1, "may not specify a duration larger than 2^32 seconds"),
    ],
)
def test_token_request_refuses_a_duration_out_of_bounds(
    access: ApiAccess, namespace: str, account: tuple[str, str], seconds: int, why: str
) -> None:
    """A duration under ten minutes or over 2^32 seconds is 422 with the real message."""
    answer = token_request(access, namespace, account[0], {"expirationSeconds": seconds})
    assert answer.status == 422, answer.body
    assert answer.body["message"] == (
        'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: '
        f"Invalid value: {seconds}: {why}"
    )
    assert answer.body["details"]["causes"][0]["field"] == "spec.expirationSeconds"


def test_token_request_for_a_missing_account_is_not_found(
    access: ApiAccess, namespace: str
) -> None:
    """No ServiceAccount, no token: 404 naming the account."""
    answer = token_request(access, namespace, "nobody")
    assert answer.status == 404
    assert (answer.body["reason"], answer.body["message"]) == (
        "NotFound",
        'serviceaccounts "nobody" not found',
    )


def test_the_token_subresource_only_creates(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """``serviceaccounts/token`` is listed in discovery with the verb create, and a GET of it is
    405."""
    listed = call(access, "GET", "/api/v1").body["resources"]
    entry = next(r for r in listed if r["name"] == "serviceaccounts/token")
    assert entry == {
        "name": "serviceaccounts/token",
        "singularName": "",
        "namespaced": True,
        "group": "authentication.k8s.io",
        "version": "v1",
        "kind": "TokenRequest",
        "verbs": ["create"],
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account[0]}/token"
    assert call(access, "GET", path).status == 405


@pytest.mark.kubectl
def test_kubectl_create_token_prints_a_token_that_works(
    kubectl: Kubectl, access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """``kubectl create token SA`` and ``--duration=10m`` print tokens that authenticate the
    account; a duration under ten minutes is refused with the server's message."""
    name = account[0]
    token = kubectl.run("create", "token", name, "-n", namespace).stdout.strip()
    short = kubectl.run("create", "token", name, "-n", namespace, "--duration=10m").stdout.strip()
    assert parts(short)[1]["exp"] - parts(short)[1]["iat"] == 600
    for issued in (token, short):
        whoami = json.loads(kubectl.run("auth", "whoami", "-o", "json", "--token", issued).stdout)
        assert (
            whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{name}"
        )
    refused = kubectl.run("create", "token", name, "-n", namespace, "--duration=5m", check=False)
    assert refused.returncode == 1
    assert "may not specify a duration less than 10 minutes" in refused.stderr


def test_token_review_authenticates_an_issued_token(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """A good token is its account: uid, the service-account groups and system:authenticated,
    the credential id of its ``jti``, for the API server's audience."""
    name, uid = account
    token = issue(access, namespace, name)
    assert review(access, token) == {
        "authenticated": True,
        "user": {
            "username": f"system:serviceaccount:{namespace}:{name}",
            "uid": uid,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "extra": {
                "authentication.kubernetes.io/credential-id": [f"JTI={parts(token)[1]['jti']}"]
            },
        },
        "audiences": [ISSUER],
    }
    assert call(access, "GET", "/version", token=token).status == 200


def test_token_review_of_the_admin_token(access: ApiAccess) -> None:
    """The kubeconfig's own token is an admin in system:masters."""
    status = review(access, str(access.token))
    assert status["authenticated"] is True
    assert status["user"]["groups"] == ["system:masters", "system:authenticated"]
    assert status["audiences"] == [ISSUER]


def test_a_token_is_only_good_for_its_audiences(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """A token for ``gateway`` is refused by the API server and accepted by a review that asks for
    that audience, and a token for the API server is refused for ``gateway``."""
    name = account[0]
    gateway = issue(access, namespace, name, audiences=["gateway"])
    assert review(access, gateway) == _rejected(
        f'token audiences ["gateway"] is invalid for the target audiences ["{ISSUER}"]'
    )
    assert call(access, "GET", "/version", token=gateway).status == 401
    accepted = review(access, gateway, ["gateway", "other"])
    assert (accepted["authenticated"], accepted["audiences"]) == (True, ["gateway"])
    plain = issue(access, namespace, name)
    assert review(access, plain, ["gateway"]) == _rejected(
        f'token audiences ["{ISSUER}"] is invalid for the target audiences ["gateway"]'
    )
    assert review(access, str(access.token), ["gateway"]) == _rejected("")


def test_a_deleted_account_takes_its_tokens_with_it(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """Once its ServiceAccount is deleted a token stops authenticating (a real server may cache a
    success for ten seconds); an account made again under the same name has another uid, which
    the old token does not carry."""
    name, uid = account
    token = issue(access, namespace, name)
    delete_account(access, namespace, name)
    eventually(
        lambda: review(access, token) == _rejected(f'serviceaccounts "{name}" not found'),
        timeout=30,
        what="the token to be refused",
    )
    assert call(access, "GET", "/version", token=token).status == 401
    again = create_account(access, namespace, name)
    eventually(
        lambda: (
            review(access, token)
            == _rejected(f"service account UID ({again}) does not match claim ({uid})")
        ),
        timeout=30,
        what="the old token to be refused for the new account",
    )


def test_a_token_bound_to_a_pod_ends_with_the_pod(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """A token bound to a pod names the pod (and its node, once it has one) and authenticates
    with the pod in its extra; when the pod is gone the token is invalidated."""
    name = account[0]
    pod = {
        "metadata": {"name": "runner"},
        "spec": {
            "serviceAccountName": name,
            "containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "600"]}],
        },
    }
    created = call(access, "POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    assert created.status == 201, created.body
    pod_uid = created.body["metadata"]["uid"]
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "runner", "uid": pod_uid}
    token = issue(access, namespace, name, boundObjectRef=ref)
    private = parts(token)[1]["kubernetes.io"]
    assert private["pod"] == {"name": "runner", "uid": pod_uid}
    status = review(access, token)
    assert status["authenticated"] is True
    extra = status["user"]["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["runner"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod_uid]
    if "node" in private:
        assert extra["authentication.kubernetes.io/node-name"] == [private["node"]["name"]]
    create_account(access, namespace, "helper")
    other = {"metadata": {"name": "other"}, "spec": {**pod["spec"], "serviceAccountName": "helper"}}
    assert call(access, "POST", f"/api/v1/namespaces/{namespace}/pods", body=other).status == 201
    wrong = token_request(
        access,
        namespace,
        name,
        {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "other"}},
    )
    assert wrong.status == 400
    assert wrong.body["message"] == (
        f'cannot bind token for serviceaccount "{name}" to pod running with different '
        "serviceaccount name."
    )
    gone = call(
        access,
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/runner",
        body={"gracePeriodSeconds": 0},
    )
    assert gone.status in (200, 202), gone.body
    eventually(
        lambda: review(access, token) == _rejected("service account token has been invalidated"),
        # On a cluster the kubelet holds the pod until its process is gone.
        timeout=90,
        what="the pod-bound token to be invalidated",
    )


def _claims(namespace: str, name: str, uid: str, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "aud": [ISSUER],
        "exp": now + 3600,
        "iat": now,
        "iss": ISSUER,
        "jti": str(uuid.uuid4()),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        "nbf": now,
        "sub": f"system:serviceaccount:{namespace}:{name}",
    }
    return {**claims, **changes}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"exp": -120, "iat": -900, "nbf": -900}, "service account token has expired"),
        ({"nbf": 600}, "service account token is not valid yet"),
        ({"iat": 600}, "service account token is issued in the future"),
        ({"exp": -30, "iat": -900, "nbf": -900}, ""),
    ],
)
def test_a_token_is_good_only_within_its_times(
    access: ApiAccess,
    namespace: str,
    account: tuple[str, str],
    signing_key: rsa.RSAPrivateKey,
    changes: dict[str, int],
    error: str,
) -> None:
    """A token signed by the cluster's key is refused once expired, before ``nbf`` and when
    issued in the future, each by more than the one-minute leeway; within it, it is good."""
    name, uid = account
    now = int(time.time())
    claims = _claims(namespace, name, uid, **{k: now + v for k, v in changes.items()})
    token = sign({"alg": "RS256", "kid": key_id(signing_key)}, claims, signing_key)
    if error:
        assert review(access, token) == _rejected(error)
        assert call(access, "GET", "/version", token=token).status == 401
    else:
        assert review(access, token)["authenticated"] is True


def test_forged_tokens_do_not_authenticate(
    access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """A token signed by another key, with a tampered payload, with ``alg: none``, naming an
    unknown key or with another issuer authenticates no one, each with the real error."""
    name, uid = account
    genuine = issue(access, namespace, name)
    header, _ = parts(genuine)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = _claims(namespace, name, uid)
    head, _, signature = genuine.split(".")
    tampered = sign(header, {**claims, "sub": "system:admin"}, stranger).split(".")[1]
    crypto = "go-jose/go-jose: error in cryptographic primitive"
    cases = {
        sign(header, claims, stranger): crypto,
        f"{head}.{tampered}.{signature}": crypto,
        sign({"alg": "none"}, claims, stranger).rsplit(".", 1)[0] + ".": crypto,
        sign({"alg": "RS256", "kid": key_id(stranger)}, claims, stranger): (
            "invalid signature, no keys found"
        ),
        sign(header, {**claims, "iss": "https://elsewhere"}, stranger): "",
        "not-a-jwt": "",
        genuine[:-1]: "",
    }
    for token, error in cases.items():
        assert review(access, token) == _rejected(error), token
        assert call(access, "GET", "/version", token=token).status == 401


def test_a_token_review_needs_a_token(access: ApiAccess) -> None:
    """An empty ``spec.token`` is a bad request, in the real server's words."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}}
    answer = call(access, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
    assert answer.status == 400
    assert answer.body["message"] == "token is required for TokenReview in authentication"


def _names_no_token(token: str) -> bool:
    """Whether a TokenReview finds no token at all in ``spec.token``: the server reads it as the
    header ``Authorization: Bearer <token>``, trimmed, whose second space-separated word is empty
    when the token is blank or starts with a space."""
    return not token.strip(GO_SPACE) or token.startswith(" ")


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (" ", {"user": {}}),
        (" \t\n", {"user": {}}),
        ("\u00a0", {"user": {}}),
        ("\u3000", {"user": {}}),
        ("\x1c", {"user": {}, "error": INVALID}),
        ("abc ", {"user": {}, "error": INVALID}),
        ("a b", {"user": {}, "error": INVALID}),
        (" {admin}", {"user": {}}),
        ("\u00a0{admin}", {"user": {}, "error": INVALID}),
        ("\t{admin}", {"user": {}, "error": INVALID}),
        ("{admin} and more words", {"authenticated": True}),
        ("{admin}\u00a0", {"authenticated": True}),
    ],
)
def test_a_token_review_reads_its_token_as_a_bearer_header(
    access: ApiAccess, token: str, expected: dict[str, Any]
) -> None:
    """``spec.token`` is authenticated as if sent as ``Authorization: Bearer <token>``: the
    header is trimmed of whitespace and the token is its second space-separated word. A blank
    token, or one led by a space, names no token: unauthenticated, with no error. Words after the
    first are not read, so the admin token followed by more words is still the admin."""
    status = review(access, token.format(admin=access.token))
    assert {key: status[key] for key in expected if key in status} == expected
    assert ("error" in status) == ("error" in expected)
    assert _names_no_token(token.format(admin=access.token)) == (
        not status.get("authenticated") and "error" not in status
    )


_SEGMENT = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/.", max_size=40
)


@st.composite
def _malformed(draw: st.DrawFn) -> str:
    """Tokens an attacker might send: noise, JWT-shaped noise, genuine-looking headers and
    payloads with junk signatures."""
    claims = draw(
        st.dictionaries(
            st.sampled_from(["iss", "sub", "aud", "exp", "nbf", "kubernetes.io", "kid"]),
            st.one_of(
                st.just(ISSUER),
                st.integers(),
                st.text(max_size=8),
                st.none(),
                st.lists(st.text(max_size=4), max_size=2),
            ),
            max_size=6,
        )
    )
    header = draw(
        st.dictionaries(
            st.sampled_from(["alg", "kid", "typ"]),
            st.sampled_from(["RS256", "none", "HS256", "", "x"]),
            max_size=3,
        )
    )
    shaped = ".".join(
        [
            _b64(json.dumps(header).encode()),
            _b64(json.dumps(claims).encode()),
            draw(_SEGMENT),
        ]
    )
    return draw(
        st.one_of(
            st.text(max_size=60),
            st.just(shaped),
            st.lists(_SEGMENT, min_size=1, max_size=4).map(".".join),
        )
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(token=_malformed())
def test_malformed_tokens_never_authenticate(access: ApiAccess, token: str) -> None:
    """Whatever is sent as a token, a TokenReview answers 201 unauthenticated (never a 500), with
    an error unless it names no token, and a request carrying it is 401."""
    if not token:
        return
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    answer = call(access, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)
    assert answer.status == 201, answer.body
    status = answer.body["status"]
    assert not status.get("authenticated")
    if _names_no_token(token):
        assert "error" not in status, status
    else:
        assert status["error"].startswith(f"[{INVALID}") or status["error"] == INVALID
    if token.isascii() and token.isprintable() and " " not in token.strip():
        assert call(access, "GET", "/version", token=token.strip()).status == 401


@pytest.mark.local_only("reads the local API server's request counts")
def test_token_requests_and_reviews_are_counted(
    cluster: Cluster, access: ApiAccess, namespace: str, account: tuple[str, str]
) -> None:
    """TokenRequests, TokenReviews and access reviews are counted by verb and resource like any
    other request."""
    local = cluster.require_local()
    local.reset_counts()
    token = issue(access, namespace, account[0])
    review(access, token)
    spec = {"user": "bob", "nonResourceAttributes": {"path": "/api", "verb": "get"}}
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    call(access, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
    counts = local.counts()
    for key in [
        ("create", "serviceaccounts/token"),
        ("create", "tokenreviews"),
        ("create", "subjectaccessreviews"),
    ]:
        assert counts[key] == 1, key
