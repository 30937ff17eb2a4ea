"""Compact JSON Web Signatures over RSA: how service-account tokens are signed and checked.

A service-account token is a JWT in compact form (``header.payload.signature``, each part
unpadded base64url), signed RS256 with the cluster's service-account key; its header names the
key by ``kid``, the base64url SHA-256 of the public key's DER, as kube-apiserver derives it. Reading
one follows go-jose as the real authenticator uses it: a token that is not three decodable parts
is no JWT at all (``None``: another authenticator may own it); one whose ``kid`` names no key
fails with ``invalid signature, no keys found``; any bad signature, or an algorithm that is not
RSA, fails with go-jose's ``error in cryptographic primitive``. Pure: keys and tokens in, claims
or a :class:`TokenError` out. :mod:`.serviceaccounts` builds on it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

_SEGMENT = re.compile(r"[A-Za-z0-9_-]*")
CRYPTO_FAILURE = "go-jose/go-jose: error in cryptographic primitive"
NO_KEYS = "invalid signature, no keys found"

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}


class TokenError(Exception):
    """A JWT in the right form that fails its checks; the message is the server's."""


def encode_segment(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def decode_segment(text: str) -> bytes:
    """Unpadded base64url, strictly: padding or a stray character is no segment (ValueError)."""
    if not _SEGMENT.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as error:
        raise ValueError(str(error)) from None


def key_id(public: rsa.RSAPublicKey) -> str:
    """The ``kid`` kube-apiserver gives tokens signed by this key."""
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return encode_segment(hashlib.sha256(der).digest())


def sign(claims: Mapping[str, Any], key: rsa.RSAPrivateKey) -> str:
    """A compact RS256 JWT of the claims, its header naming the key."""
    header = {"alg": "RS256", "kid": key_id(key.public_key())}
    signing_input = ".".join(
        encode_segment(json.dumps(part, separators=(",", ":"), sort_keys=True).encode())
        for part in (header, claims)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{encode_segment(signature)}"


def unverified_claims(token: str) -> Mapping[str, Any] | None:
    """The payload of something shaped like a JWT, unchecked: only to see whose it claims to be."""
    if token.strip().startswith("{"):
        return None
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(decode_segment(parts[1]))
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def verify(token: str, keys: Sequence[rsa.RSAPublicKey]) -> dict[str, Any] | None:
    """The verified claims of a compact JWT signed by one of the keys.

    None when the token is no compact JWS at all; :class:`TokenError` when it is one that the
    keys do not vouch for.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = json.loads(decode_segment(parts[0]))
        payload = decode_segment(parts[1])
        signature = decode_segment(parts[2])
    except ValueError:
        return None
    kid = header.get("kid") if isinstance(header, dict) else None
    if not isinstance(header, dict) or not isinstance(kid, str | None):
        return None
    candidates = [k for k in keys if not kid or key_id(k) == kid]
    if not candidates:
        raise TokenError(NO_KEYS)
    signing_input = f"{parts[0]}.{parts[1]}".encode()
    if not any(_checks(header.get("alg"), k, signing_input, signature) for k in candidates):
        raise TokenError(CRYPTO_FAILURE)
    try:
        claims = json.loads(payload)
    except ValueError:
        raise TokenError("invalid character in the token's claims") from None
    if not isinstance(claims, dict):
        raise TokenError("json: cannot unmarshal the token's claims into an object")
    return claims


def _checks(alg: object, key: rsa.RSAPublicKey, signed: bytes, signature: bytes) -> bool:
    if not isinstance(alg, str) or alg[:2] not in ("RS", "PS") or alg[2:] not in _HASHES:
        return False
    digest = _HASHES[alg[2:]]()
    pad: padding.AsymmetricPadding = (
        padding.PKCS1v15()
        if alg.startswith("RS")
        else padding.PSS(mgf=padding.MGF1(digest), salt_length=padding.PSS.DIGEST_LENGTH)
    )
    try:
        key.verify(signature, signed, pad, digest)
    except InvalidSignature:
        return False
    return True
