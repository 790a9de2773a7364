"""RocketMQ ACL 1.0 request signatures (AclClientRPCHook / AclUtils / AclSigner), shared by
the client that signs and the broker that checks.

The signed content is the request's ext fields sorted by key (Java TreeMap order: UTF-16 code
units), ``Signature`` left out, their VALUES concatenated and UTF-8 encoded, followed by the
body bytes. The signature is base64(HmacSHA1(secret key, content)) in ext field
``Signature``; ``AccessKey`` (and ``SecurityToken`` when used) are added before signing, so
they are signed too. The C++ client signs its ``OnsChannel`` field the same way.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, MutableMapping
from typing import Final

__all__ = [
    "ACCESS_KEY",
    "ONS_CHANNEL",
    "SECRET_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "calculate_signature",
    "calculate_v2_signature",
    "combine_request_content",
    "sign_request",
]

ACCESS_KEY: Final = "AccessKey"
SECRET_KEY: Final = "SecretKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"
ONS_CHANNEL: Final = "OnsChannel"


def _java_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def combine_request_content(ext_fields: Mapping[str, str], body: bytes | None, *,
                            skip: frozenset[str] = frozenset()) -> bytes:
    """The bytes a signature covers; ``skip`` names further fields left out (the broker drops
    one that old clients added after signing)."""
    values = "".join(ext_fields[key] for key in sorted(ext_fields, key=_java_order)
                     if key != SIGNATURE and key not in skip)
    return values.encode("utf-8") + (body or b"")


def calculate_signature(content: bytes, secret_key: str) -> str:
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def calculate_v2_signature(content: bytes, secret_key: str) -> str:
    """RocketMQ 5's ``MQv2-HMAC-SHA1``: hex HmacSHA1(secret key, the ``x-mq-date-time`` value),
    which the gRPC clients send in the ``authorization`` header."""
    return hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).hexdigest().upper()


def sign_request(ext_fields: MutableMapping[str, str], body: bytes | None, access_key: str, secret_key: str,
                 security_token: str | None = None) -> None:
    """Add ``AccessKey`` (and ``SecurityToken``) and the ``Signature`` over all fields + body."""
    ext_fields[ACCESS_KEY] = access_key
    if security_token:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields[SIGNATURE] = calculate_signature(combine_request_content(ext_fields, body), secret_key)
