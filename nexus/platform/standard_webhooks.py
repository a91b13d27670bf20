"""The Standard Webhooks signature (https://www.standardwebhooks.com), the one implementation
both directions use: Integration verifies inbound deliveries with it, Runtime signs outbound
webhooks with it.

    webhook-id: <message id>        webhook-timestamp: <unix seconds>
    webhook-signature: v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}." + body))>

A `whsec_` secret is the base64 of the key; any other secret is used as its UTF-8 bytes
(`key_format="auto"`). Pure: no I/O, no clock, no logging; nothing here returns or raises
with a secret in it.
"""

from __future__ import annotations

import base64
import hmac
from typing import Literal

WHSEC_PREFIX = "whsec_"
KeyFormat = Literal["auto", "base64", "raw"]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def derive_key(secret: str, key_format: KeyFormat = "auto") -> bytes:
    """The MAC key of a secret; ValueError (naming no secret) when it cannot be one."""
    if key_format == "raw" or (key_format == "auto" and not secret.startswith(WHSEC_PREFIX)):
        return _utf8(secret)
    try:
        return base64.b64decode(secret.removeprefix(WHSEC_PREFIX), validate=True)
    except ValueError:
        raise ValueError("the secret is not valid base64 after 'whsec_'") from None


def signed_content(msg_id: str, timestamp: str, body: bytes) -> bytes:
    return _utf8(f"{msg_id}.{timestamp}.") + body


def mac(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    """The raw v1 signature (32 bytes)."""
    return hmac.digest(key, signed_content(msg_id, timestamp, body), "sha256")


def signature_headers(key: bytes, *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers a sender adds."""
    stamp = str(int(timestamp))
    signature = base64.b64encode(mac(key, msg_id, stamp, body)).decode("ascii")
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": stamp,
        "webhook-signature": f"v1,{signature}",
    }
