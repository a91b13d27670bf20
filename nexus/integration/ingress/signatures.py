"""Webhook signature schemes: did the holder of the route's secret send this request?

Pure and synchronous: no I/O, no clock (the caller passes `received_at_seconds`), no logging.
A connector route names one scheme and its settings in metadata (`SchemeConfig`, a union
discriminated on `scheme`); its secret reference resolves to one or more secrets, and any of
them may match (key rotation: list the new secret and the old one until the sender has moved).

Schemes are named after the signing format, not after whoever uses it: `stripe` is the
`t=...,v1=...` format, `github` the `sha256=<hex>` body MAC, `hubspot_v3` the
method + URI + body + timestamp MAC; `hmac` and `shared_secret` cover senders with their own
variations.

A failure is a `Verdict` with one `Reason`. Malformed input never raises. Order of checks:
secrets configured -> required headers present -> headers well formed -> MAC -> replay window,
so `stale_timestamp` / `future_timestamp` mean "genuinely signed, but outside the window".
Nothing in a verdict, its detail or an exception contains a secret, a signature value or body
bytes: details name headers only. Every MAC comparison is `hmac.compare_digest`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from nexus.platform import standard_webhooks


class Reason(StrEnum):
    MISSING_SIGNATURE = "missing_signature"
    MISSING_TIMESTAMP = "missing_timestamp"
    MISSING_ID = "missing_id"
    MALFORMED_SIGNATURE = "malformed_signature"
    MALFORMED_TIMESTAMP = "malformed_timestamp"
    BAD_SIGNATURE = "bad_signature"
    STALE_TIMESTAMP = "stale_timestamp"
    FUTURE_TIMESTAMP = "future_timestamp"
    NO_SECRET = "no_secret"  # noqa: S105 - a reason code, not a credential
    INVALID_SECRET = "invalid_secret"  # noqa: S105 - a reason code, not a credential


class SignatureConfigError(ValueError):
    """A scheme configuration (or a secret handed to `sign`) is unusable; names no secret."""


@dataclass(frozen=True)
class Verdict:
    scheme: str
    reason: Reason | None = None  # None: verified
    detail: str = ""  # header names only, never values
    key_index: int | None = None  # which secret matched (rotation telemetry)
    signed_at: float | None = None  # the signed timestamp, seconds, for schemes that have one

    @property
    def ok(self) -> bool:
        return self.reason is None

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.reason is None:
            return f"{self.scheme}: verified (secret #{self.key_index})"
        return f"{self.scheme}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class WebhookRequest:
    """What a scheme may look at. `url` is the full URL as the sender called it."""

    method: str
    url: str
    headers: Mapping[str, str] = field(repr=False)
    body: bytes = field(repr=False)
    received_at_seconds: float

    def __post_init__(self) -> None:
        lowered = {name.lower(): value for name, value in self.headers.items()}
        object.__setattr__(self, "headers", lowered)

    def header(self, *names: str) -> str | None:
        """The first of `names` present with a non-blank value, stripped."""
        for name in names:
            value = self.headers.get(name.lower())
            if value is not None and value.strip():
                return value.strip()
        return None


# ---------------------------------------------------------------- helpers

_DIGITS = re.compile(r"[0-9]{1,16}")
_HEX = re.compile(r"[0-9A-Fa-f]+")
_HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
# The percent-encodings HubSpot decodes in the request URI before signing (v3 docs).
_HUBSPOT_DECODED = re.compile(r"%(3A|2F|3F|40|21|24|27|28|29|2A|2C|3B)", re.IGNORECASE)
_DIGEST_SIZE = {"sha1": 20, "sha256": 32, "sha512": 64}

Tolerance = Annotated[int, Field(ge=1, le=86_400)]
HeaderName = Annotated[str, Field(pattern=_HEADER_NAME)]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _seconds(text: str) -> int | None:
    return int(text) if _DIGITS.fullmatch(text) else None


def _from_hex(text: str, size: int) -> bytes | None:
    if len(text) != 2 * size or not _HEX.fullmatch(text):  # fromhex alone allows spaces
        return None
    return bytes.fromhex(text)


def _from_b64(text: str, size: int) -> bytes | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error, or non-ASCII input
        return None
    return raw if len(raw) == size else None


def _fail(scheme: str, reason: Reason, detail: str = "") -> Verdict:
    return Verdict(scheme=scheme, reason=reason, detail=detail)


def _match(
    keys: Sequence[bytes | None], content: bytes, algorithm: str, candidates: Sequence[bytes]
) -> int | None:
    """Index of the first secret whose MAC of `content` equals one of `candidates`."""
    for index, key in enumerate(keys):
        if key is None:
            continue
        expected = hmac.digest(key, content, algorithm)
        for candidate in candidates:
            if hmac.compare_digest(expected, candidate):
                return index
    return None


def _conclude(
    scheme: str,
    *,
    keys: Sequence[bytes | None],
    content: bytes,
    candidates: Sequence[bytes],
    algorithm: str = "sha256",
    signed_ms: int | None = None,
    now_seconds: float = 0,
    tolerance_seconds: int = 0,
) -> Verdict:
    index = _match(keys, content, algorithm, candidates)
    if index is None:
        return _fail(scheme, Reason.BAD_SIGNATURE)
    if signed_ms is None:
        return Verdict(scheme=scheme, key_index=index)
    age_ms = round(now_seconds * 1000) - signed_ms
    if age_ms > tolerance_seconds * 1000:
        return _fail(scheme, Reason.STALE_TIMESTAMP, f"older than {tolerance_seconds} s")
    if -age_ms > tolerance_seconds * 1000:
        return _fail(scheme, Reason.FUTURE_TIMESTAMP, f"ahead by more than {tolerance_seconds} s")
    return Verdict(scheme=scheme, key_index=index, signed_at=signed_ms / 1000)


def _default_id(timestamp: str, body: bytes) -> str:
    return "msg_" + hashlib.sha256(_utf8(timestamp) + b"." + body).hexdigest()[:24]


def hubspot_signed_uri(url: str) -> str:
    """The URI as HubSpot signs it: the listed reserved characters percent-decoded, once."""
    return _HUBSPOT_DECODED.sub(lambda m: chr(int(m.group(1), 16)), url)


# ---------------------------------------------------------------- schemes


class _Scheme(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def derive_key(self, secret: str) -> bytes:
        """The MAC key for one configured secret; ValueError if it cannot be one."""
        return _utf8(secret)

    def delivery_id(self, request: WebhookRequest) -> str | None:
        """The sender's delivery id, where the format defines one. Trust it only once verified."""
        return None


class StandardWebhooksScheme(_Scheme):
    """Standard Webhooks (and Svix's `svix-*` headers): HMAC-SHA256 of `{id}.{timestamp}.{body}`,
    `webhook-signature` a space-separated list of `v1,<base64>`; other versions (`v1a`) are
    skipped. `key_format`: `auto` base64-decodes a `whsec_` secret and uses any other as
    its UTF-8 bytes; `base64` decodes with or without the prefix (the reference libraries);
    `raw` always uses the UTF-8 bytes."""

    scheme: Literal["standard_webhooks"] = "standard_webhooks"
    tolerance_seconds: Tolerance = 300
    key_format: Literal["auto", "base64", "raw"] = "auto"

    def derive_key(self, secret: str) -> bytes:
        return standard_webhooks.derive_key(secret, self.key_format)

    def delivery_id(self, request: WebhookRequest) -> str | None:
        return request.header("webhook-id", "svix-id")

    def check(self, request: WebhookRequest, keys: Sequence[bytes | None]) -> Verdict:
        signature = request.header("webhook-signature", "svix-signature")
        if signature is None:
            return _fail(self.scheme, Reason.MISSING_SIGNATURE, "webhook-signature")
        msg_id = self.delivery_id(request)
        if msg_id is None:
            return _fail(self.scheme, Reason.MISSING_ID, "webhook-id")
        stamp = request.header("webhook-timestamp", "svix-timestamp")
        if stamp is None:
            return _fail(self.scheme, Reason.MISSING_TIMESTAMP, "webhook-timestamp")
        seconds = _seconds(stamp)
        if seconds is None:
            return _fail(self.scheme, Reason.MALFORMED_TIMESTAMP, "webhook-timestamp")
        candidates = []
        for entry in signature.split():
            version, comma, value = entry.partition(",")
            raw = _from_b64(value, 32) if version == "v1" and comma else None
            if raw is not None:
                candidates.append(raw)
        if not candidates:
            return _fail(self.scheme, Reason.MALFORMED_SIGNATURE, "webhook-signature")
        return _conclude(
            self.scheme,
            keys=keys,
            content=standard_webhooks.signed_content(msg_id, stamp, request.body),
            candidates=candidates,
            signed_ms=seconds * 1000,
            now_seconds=request.received_at_seconds,
            tolerance_seconds=self.tolerance_seconds,
        )

    def headers_for(
        self, key: bytes, *, body: bytes, method: str, url: str, now: float, delivery_id: str | None
    ) -> dict[str, str]:
        msg_id = delivery_id or _default_id(str(int(now)), body)
        return standard_webhooks.signature_headers(
            key, msg_id=msg_id, timestamp=int(now), body=body
        )


class StripeScheme(_Scheme):
    """`Stripe-Signature: t=<seconds>,v1=<hex>[,v1=<hex>...]`: HMAC-SHA256 hex of `{t}.{body}`.
    `v0` and unknown elements are ignored. The delivery id lives in the body, so none here."""

    scheme: Literal["stripe"] = "stripe"
    tolerance_seconds: Tolerance = 300

    def check(self, request: WebhookRequest, keys: Sequence[bytes | None]) -> Verdict:
        header = request.header("stripe-signature")
        if header is None:
            return _fail(self.scheme, Reason.MISSING_SIGNATURE, "Stripe-Signature")
        stamps: list[str] = []
        candidates: list[bytes] = []
        for item in header.split(","):
            name, equals, value = item.strip().partition("=")
            if not equals:
                continue
            if name == "t":
                stamps.append(value)
            elif name == "v1":
                raw = _from_hex(value, 32)
                candidates += [raw] if raw is not None else []
        if not stamps:
            return _fail(self.scheme, Reason.MISSING_TIMESTAMP, "Stripe-Signature t")
        seconds = _seconds(stamps[0]) if len(stamps) == 1 else None
        if seconds is None:
            return _fail(self.scheme, Reason.MALFORMED_TIMESTAMP, "Stripe-Signature t")
        if not candidates:
            return _fail(self.scheme, Reason.MALFORMED_SIGNATURE, "Stripe-Signature v1")
        return _conclude(
            self.scheme,
            keys=keys,
            content=_utf8(f"{stamps[0]}.") + request.body,
            candidates=candidates,
            signed_ms=seconds * 1000,
            now_seconds=request.received_at_seconds,
            tolerance_seconds=self.tolerance_seconds,
        )

    def headers_for(
        self, key: bytes, *, body: bytes, method: str, url: str, now: float, delivery_id: str | None
    ) -> dict[str, str]:
        stamp = str(int(now))
        mac = hmac.digest(key, _utf8(f"{stamp}.") + body, "sha256").hex()
        return {"Stripe-Signature": f"t={stamp},v1={mac}"}


class GitHubScheme(_Scheme):
    """`X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the body alone. Nothing time-bound
    is signed, so there is no replay window: a captured delivery verifies forever, and only
    idempotency on `X-GitHub-Delivery` (which is not signed) limits its effect."""

    scheme: Literal["github"] = "github"

    def delivery_id(self, request: WebhookRequest) -> str | None:
        return request.header("x-github-delivery")

    def check(self, request: WebhookRequest, keys: Sequence[bytes | None]) -> Verdict:
        header = request.header("x-hub-signature-256")
        if header is None:
            return _fail(self.scheme, Reason.MISSING_SIGNATURE, "X-Hub-Signature-256")
        algorithm, equals, value = header.partition("=")
        raw = _from_hex(value, 32) if algorithm == "sha256" and equals else None
        if raw is None:
            return _fail(self.scheme, Reason.MALFORMED_SIGNATURE, "X-Hub-Signature-256")
        return _conclude(self.scheme, keys=keys, content=request.body, candidates=[raw])

    def headers_for(
        self, key: bytes, *, body: bytes, method: str, url: str, now: float, delivery_id: str | None
    ) -> dict[str, str]:
        headers = {"X-Hub-Signature-256": "sha256=" + hmac.digest(key, body, "sha256").hex()}
        if delivery_id:
            headers["X-GitHub-Delivery"] = delivery_id
        return headers


class HubSpotV3Scheme(_Scheme):
    """`X-HubSpot-Signature-v3`: base64 HMAC-SHA256 of method + URI + body + timestamp, where
    the timestamp is `X-HubSpot-Request-Timestamp` (milliseconds, as sent) and the URI is the
    full URL the sender called with `%3A %2F %3F %40 %21 %24 %27 %28 %29 %2A %2C %3B` decoded
    (`hubspot_signed_uri`). The sender's docs reject only old requests; this also refuses
    timestamps further ahead than the tolerance."""

    scheme: Literal["hubspot_v3"] = "hubspot_v3"
    tolerance_seconds: Tolerance = 300

    def check(self, request: WebhookRequest, keys: Sequence[bytes | None]) -> Verdict:
        header = request.header("x-hubspot-signature-v3")
        if header is None:
            return _fail(self.scheme, Reason.MISSING_SIGNATURE, "X-HubSpot-Signature-v3")
        stamp = request.header("x-hubspot-request-timestamp")
        if stamp is None:
            return _fail(self.scheme, Reason.MISSING_TIMESTAMP, "X-HubSpot-Request-Timestamp")
        millis = _seconds(stamp)
        if millis is None:
            return _fail(self.scheme, Reason.MALFORMED_TIMESTAMP, "X-HubSpot-Request-Timestamp")
        raw = _from_b64(header, 32)
        if raw is None:
            return _fail(self.scheme, Reason.MALFORMED_SIGNATURE, "X-HubSpot-Signature-v3")
        return _conclude(
            self.scheme,
            keys=keys,
            content=self._content(request.method, request.url, request.body, stamp),
            candidates=[raw],
            signed_ms=millis,
            now_seconds=request.received_at_seconds,
            tolerance_seconds=self.tolerance_seconds,
        )

    @staticmethod
    def _content(method: str, url: str, body: bytes, stamp: str) -> bytes:
        return _utf8(method.upper() + hubspot_signed_uri(url)) + body + _utf8(stamp)

    def headers_for(
        self, key: bytes, *, body: bytes, method: str, url: str, now: float, delivery_id: str | None
    ) -> dict[str, str]:
        stamp = str(round(now * 1000))
        mac = hmac.digest(key, self._content(method, url, body, stamp), "sha256")
        return {
            "X-HubSpot-Signature-v3": base64.b64encode(mac).decode("ascii"),
            "X-HubSpot-Request-Timestamp": stamp,
        }


_TEMPLATE_FIELDS = ("body", "timestamp", "method", "url", "id")


class HmacScheme(_Scheme):
    """A configurable MAC: `header` carries `prefix` + hex/base64 of HMAC(`algorithm`) over
    `signed_content`, a template of `{body}` (required, once) and optionally `{timestamp}`
    (the raw `timestamp_header` value; then the replay window applies), `{method}`, `{url}`
    and `{id}` (`delivery_id_header`). Default: `{timestamp}.{body}` with a timestamp header,
    else `{body}`."""

    scheme: Literal["hmac"] = "hmac"
    header: HeaderName
    algorithm: Literal["sha1", "sha256", "sha512"] = "sha256"
    encoding: Literal["hex", "base64"] = "hex"
    prefix: str = ""
    timestamp_header: HeaderName | None = None
    timestamp_unit: Literal["s", "ms"] = "s"
    tolerance_seconds: Tolerance = 300
    signed_content: str | None = None
    delivery_id_header: HeaderName | None = None

    @property
    def template(self) -> str:
        if self.signed_content is not None:
            return self.signed_content
        return "{timestamp}.{body}" if self.timestamp_header else "{body}"

    @model_validator(mode="after")
    def _template_fields(self) -> HmacScheme:
        try:
            parts = list(string.Formatter().parse(self.template))
        except ValueError as exc:
            raise ValueError(f"signed_content: {exc}") from None
        names = [name for _, name, _, _ in parts if name is not None]
        for _, name, spec, conversion in parts:
            if name is not None and (name not in _TEMPLATE_FIELDS or spec or conversion):
                allowed = ", ".join("{" + f + "}" for f in _TEMPLATE_FIELDS)
                raise ValueError(f"signed_content: unknown placeholder (allowed: {allowed})")
        if names.count("body") != 1:
            raise ValueError("signed_content must contain {body} exactly once")
        if ("timestamp" in names) != (self.timestamp_header is not None):
            raise ValueError(
                "timestamp_header and {timestamp} in signed_content go together: "
                "an unsigned timestamp gives no replay protection"
            )
        if "id" in names and self.delivery_id_header is None:
            raise ValueError("{id} in signed_content needs delivery_id_header")
        return self

    def delivery_id(self, request: WebhookRequest) -> str | None:
        return request.header(self.delivery_id_header) if self.delivery_id_header else None

    def _fields(self) -> list[str]:
        return [name for _, name, _, _ in string.Formatter().parse(self.template) if name]

    def _presented(self, header: str) -> bytes | None:
        if not header.startswith(self.prefix):
            return None
        value, size = header[len(self.prefix) :], _DIGEST_SIZE[self.algorithm]
        return _from_hex(value, size) if self.encoding == "hex" else _from_b64(value, size)

    def _content(self, values: Mapping[str, bytes]) -> bytes:
        out = bytearray()
        for literal, name, _, _ in string.Formatter().parse(self.template):
            out += _utf8(literal)
            if name is not None:
                out += values[name]
        return bytes(out)

    def check(self, request: WebhookRequest, keys: Sequence[bytes | None]) -> Verdict:
        header = request.header(self.header)
        if header is None:
            return _fail(self.scheme, Reason.MISSING_SIGNATURE, self.header)
        values = {
            "body": request.body,
            "method": _utf8(request.method.upper()),
            "url": _utf8(request.url),
        }
        signed_ms: int | None = None
        if self.timestamp_header is not None:
            stamp = request.header(self.timestamp_header)
            if stamp is None:
                return _fail(self.scheme, Reason.MISSING_TIMESTAMP, self.timestamp_header)
            number = _seconds(stamp)
            if number is None:
                return _fail(self.scheme, Reason.MALFORMED_TIMESTAMP, self.timestamp_header)
            signed_ms = number * 1000 if self.timestamp_unit == "s" else number
            values["timestamp"] = _utf8(stamp)
        if self.delivery_id_header is not None:
            msg_id = request.header(self.delivery_id_header)
            if msg_id is None and "id" in self._fields():
                return _fail(self.scheme, Reason.MISSING_ID, self.delivery_id_header)
            values["id"] = _utf8(msg_id or "")
        raw = self._presented(header)
        if raw is None:
            return _fail(self.scheme, Reason.MALFORMED_SIGNATURE, self.header)
        return _conclude(
            self.scheme,
            keys=keys,
            content=self._content(values),
            candidates=[raw],
            algorithm=self.algorithm,
            signed_ms=signed_ms,
            now_seconds=request.received_at_seconds,
            tolerance_seconds=self.tolerance_seconds,
        )

    def headers_for(
        self, key: bytes, *, body: bytes, method: str, url: str, now: float, delivery_id: str | None
    ) -> dict[str, str]:
        stamp = str(int(now) if self.timestamp_unit == "s" else round(now * 1000))
        values = {"body": body, "method": _utf8(method.upper()), "url": _utf8(url)}
        headers: dict[str, str] = {}
        if self.timestamp_header is not None:
            values["timestamp"] = _utf8(stamp)
            headers[self.timestamp_header] = stamp
        if self.delivery_id_header is not None:
            msg_id = delivery_id or _default_id(stamp, body)
            values["id"] = _utf8(msg_id)
            headers[self.delivery_id_header] = msg_id
        mac = hmac.digest(key, self._content(values), self.algorithm)
        encoded = mac.hex() if self.encoding == "hex" else base64.b64encode(mac).decode("ascii")
        headers[self.header] = self.prefix + encoded
        return headers


class SharedSecretScheme(_Scheme):
    """`header` must equal `prefix` + the secret (e.g. `Authorization: Bearer <secret>`).
    No MAC: the body is not authenticated and there is no replay window; TLS is the only
    protection. Compared as SHA-256 digests so the comparison does not leak the length."""

    scheme: Literal["shared_secret"] = "shared_secret"
    header: HeaderName
    prefix: str = ""
    delivery_id_header: HeaderName | None = None

    def delivery_id(self, request: WebhookRequest) -> str | None:
        return request.header(self.delivery_id_header) if self.delivery_id_header else None

    def check(self, request: WebhookRequest, keys: Sequence[bytes | None]) -> Verdict:
        header = request.header(self.header)
        if header is None:
            return _fail(self.scheme, Reason.MISSING_SIGNATURE, self.header)
        if not header.startswith(self.prefix):
            return _fail(self.scheme, Reason.MALFORMED_SIGNATURE, self.header)
        presented = hashlib.sha256(_utf8(header[len(self.prefix) :])).digest()
        for index, key in enumerate(keys):
            if key is not None and hmac.compare_digest(presented, hashlib.sha256(key).digest()):
                return Verdict(scheme=self.scheme, key_index=index)
        return _fail(self.scheme, Reason.BAD_SIGNATURE)

    def headers_for(
        self, key: bytes, *, body: bytes, method: str, url: str, now: float, delivery_id: str | None
    ) -> dict[str, str]:
        headers = {self.header: self.prefix + key.decode("utf-8", "surrogatepass")}
        if self.delivery_id_header and delivery_id:
            headers[self.delivery_id_header] = delivery_id
        return headers


# ---------------------------------------------------------------- entry points

AnyScheme = (
    StandardWebhooksScheme
    | StripeScheme
    | GitHubScheme
    | HubSpotV3Scheme
    | HmacScheme
    | SharedSecretScheme
)
SchemeConfig = Annotated[AnyScheme, Field(discriminator="scheme")]
SCHEMES: tuple[str, ...] = (
    "standard_webhooks",
    "stripe",
    "github",
    "hubspot_v3",
    "hmac",
    "shared_secret",
)
_ADAPTER: TypeAdapter[AnyScheme] = TypeAdapter(SchemeConfig)


def parse_scheme(data: Mapping[str, Any]) -> AnyScheme:
    """A route's `signature` metadata as a scheme config, or SignatureConfigError saying why."""
    allowed = ", ".join(SCHEMES)
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "union_tag_invalid":
            name = first.get("ctx", {}).get("tag", "")
            raise SignatureConfigError(
                f"unknown signature scheme {name!r} (allowed: {allowed})"
            ) from None
        if first["type"] == "union_tag_not_found":
            message = f"signature: 'scheme' is required (allowed: {allowed})"
            raise SignatureConfigError(message) from None
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise SignatureConfigError(f"signature: {where}: {message}") from None


def derive_keys(config: AnyScheme, secrets: Sequence[str]) -> list[bytes | None]:
    """Each secret's MAC key, None for one the scheme cannot use (an empty key authenticates
    nothing). The ingress derives them once per route refresh (`verify_keys`)."""
    if isinstance(secrets, str):
        secrets = (secrets,)
    keys: list[bytes | None] = []
    for secret in secrets:
        try:
            key: bytes | None = config.derive_key(secret)
        except ValueError:
            key = None
        keys.append(key or None)
    return keys


def verify(config: AnyScheme, secrets: Sequence[str], request: WebhookRequest) -> Verdict:
    """Check `request` against every secret (newest first by convention); never raises on
    request content. `key_index` on success says which secret matched."""
    return verify_keys(config, derive_keys(config, secrets), request)


def verify_keys(
    config: AnyScheme, keys: Sequence[bytes | None], request: WebhookRequest
) -> Verdict:
    """`verify` with the secrets' keys already derived (`derive_keys`): same verdicts."""
    if not keys:
        return _fail(config.scheme, Reason.NO_SECRET)
    if all(key is None for key in keys):
        return _fail(config.scheme, Reason.INVALID_SECRET, f"{len(keys)} configured, none usable")
    return config.check(request, keys)


def sign(
    config: AnyScheme,
    secret: str,
    *,
    body: bytes,
    now_seconds: float,
    method: str = "POST",
    url: str = "",
    delivery_id: str | None = None,
) -> dict[str, str]:
    """The headers a sender using `config` would add (for `nexus hooks send` and tests)."""
    [key] = derive_keys(config, [secret])
    if key is None:
        raise SignatureConfigError(f"the secret is not usable with scheme {config.scheme}")
    return config.headers_for(
        key, body=body, method=method, url=url, now=now_seconds, delivery_id=delivery_id
    )


def delivery_id(config: AnyScheme, request: WebhookRequest) -> str | None:
    """The sender's delivery id where the scheme defines one (`webhook-id`,
    `X-GitHub-Delivery`, a configured header); None where it lives in the body."""
    return config.delivery_id(request)
