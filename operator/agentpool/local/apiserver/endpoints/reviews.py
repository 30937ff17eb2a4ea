"""HTTP for what is created but never stored: the reviews and ``serviceaccounts/NAME/token``.

``handlers.Routes`` sends a ``create`` of a review kind (TokenReview, SelfSubjectReview, the
access reviews, SelfSubjectRulesReview) or of a service account's ``token`` here; each reads the
body and asks ``auth`` (identities, the authorizer, TokenRequest) for the filled-in object the
real REST handler answers, which ``handlers`` sends with 201.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agentpool.local.apiserver.auth import reviews, tokenrequests
from agentpool.local.apiserver.auth.identities import Identities
from agentpool.local.apiserver.auth.policy import Authorizer
from agentpool.local.apiserver.endpoints.auth import requester
from agentpool.local.apiserver.endpoints.parsing import Target, read_body
from agentpool.local.apiserver.errors import method_not_supported
from agentpool.local.apiserver.registry.core import Core

_ACCESS_REVIEWS = {
    "subjectaccessreviews": "SubjectAccessReview",
    "localsubjectaccessreviews": "LocalSubjectAccessReview",
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
}


class Reviews:
    """The create-only endpoints, sharing the server's identities and authorizer."""

    def __init__(self, core: Core, identities: Identities, authorizer: Authorizer) -> None:
        self.core = core
        self.identities = identities
        self.authorizer = authorizer

    async def answer(self, request: web.Request, target: Target) -> dict[str, Any]:
        """The answer to a review of the target's kind, or the token a service account asked."""
        body = await read_body(request)
        plural = target.rt.plural
        if target.subresource == "token":
            answer = tokenrequests.request_token(
                self.core,
                self.identities,
                target.rt,
                target.namespace or "",
                target.name or "",
                body,
            )
        elif plural == "tokenreviews":
            answer = reviews.token_review(body, self.identities)
        elif plural == "selfsubjectreviews":
            answer = reviews.self_subject_review(requester(request), self.core.now())
        elif plural == "selfsubjectrulesreviews":
            policy = self.authorizer.policy()
            answer = reviews.rules_review(body, requester(request), policy)
        elif plural in _ACCESS_REVIEWS:
            review = reviews.access_review(
                _ACCESS_REVIEWS[plural],
                body,
                requester=requester(request),
                namespace=target.namespace or "",
            )
            answer = reviews.access_answer(review, self.authorizer.decide(review.attributes))
        else:
            raise method_not_supported()
        return answer
