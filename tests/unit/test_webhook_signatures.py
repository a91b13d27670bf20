"""Webhook signature schemes: known answers, round trips, tampering, rotation, replay windows,
malformed input, and that no failure ever repeats a secret or a signature."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.integration.ingress.signatures import (
    SCHEMES,
    AnyScheme,
    GitHubScheme,
    HmacScheme,
    HubSpotV3Scheme,
    Reason,
    SharedSecretScheme,
    SignatureConfigError,
    StandardWebhooksScheme,
    StripeScheme,
    Verdict,
    WebhookRequest,
    delivery_id,
    hubspot_signed_uri,
    parse_scheme,
    sign,
    verify,
)

NOW = 1_700_000_000
URL = "https://hooks.example.com/webhooks/acme/contacts?tenant=42"
BODY = b'{"type":"contact.created","data":{"id":"c_1","name":"J\xc3\xa9r\xc3\xb4me"}}'
SECRET = "s3cr3t-current-0123456789abcdef"
OLD_SECRET = "s3cr3t-previous-fedcba9876543210"
WHSEC = "whsec_" + base64.b64encode(b"k" * 24 + b"\x00\xff\x10").decode()
OLD_WHSEC = "whsec_" + base64.b64encode(b"j" * 32).decode()

#: Every scheme once, with a secret it accepts; shared_secret does not cover the body.
CONFIGS: dict[str, tuple[AnyScheme, str]] = {
    "standard_webhooks": (StandardWebhooksScheme(), WHSEC),
    "stripe": (StripeScheme(), SECRET),
    "github": (GitHubScheme(), SECRET),
    "hubspot_v3": (HubSpotV3Scheme(), SECRET),
    "hmac": (HmacScheme(header="X-Signature"), SECRET),
    "hmac_timestamped": (
        HmacScheme(
            header="X-Signature",
            algorithm="sha512",
            encoding="base64",
            prefix="v1=",
            timestamp_header="X-Timestamp",
        ),
        SECRET,
    ),
    "shared_secret": (SharedSecretScheme(header="X-Webhook-Token"), SECRET),
}
BODY_SIGNED = [name for name in CONFIGS if name != "shared_secret"]
TIMESTAMPED = ["standard_webhooks", "stripe", "hubspot_v3", "hmac_timestamped"]


def request(
    headers: dict[str, str],
    *,
    body: bytes = BODY,
    now: float = NOW,
    method: str = "POST",
    url: str = URL,
) -> WebhookRequest:
    return WebhookRequest(
        method=method, url=url, headers=headers, body=body, received_at_seconds=now
    )


def signed(name: str, *, body: bytes = BODY, at: float = NOW, secret: str | None = None) -> Any:
    config, default_secret = CONFIGS[name]
    headers = sign(config, secret or default_secret, body=body, now_seconds=at, url=URL)
    return config, headers


def mac(key: bytes, message: bytes, algorithm: str = "sha256") -> bytes:
    return hmac.new(key, message, getattr(hashlib, algorithm)).digest()


# ---------------------------------------------------------------- known answers


def test_the_standard_webhooks_reference_vector() -> None:
    """From the Standard Webhooks reference library tests (`test_sign_function`)."""
    config = StandardWebhooksScheme()
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    assert verify(config, [secret], request(headers, body=body, now=1614265330))
    produced = sign(
        config, secret, body=body, now_seconds=1614265330, delivery_id=headers["webhook-id"]
    )
    assert produced == headers


def test_the_reference_library_decodes_unprefixed_secrets_as_base64_when_asked() -> None:
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    req = request(headers, body=b'{"test": 2432232314}', now=1614265330)
    bare = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    assert verify(StandardWebhooksScheme(key_format="base64"), [bare], req)
    # `auto` (the default) takes an unprefixed secret as raw bytes
    assert verify(StandardWebhooksScheme(), [bare], req).reason is Reason.BAD_SIGNATURE


def test_the_hubspot_sdk_v3_vector() -> None:
    """From HubSpot's Python SDK tests (`test_get_signature__v3`); the timestamp is in ms."""
    secret = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
    headers = {
        "X-HubSpot-Signature-v3": "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw=",
        "X-HubSpot-Request-Timestamp": "15000000",
    }
    req = request(
        headers,
        body=b"{'example_field':'example_value'}",
        url="https://www.example.com/webhook_uri",
        now=15_000,
    )
    verdict = verify(HubSpotV3Scheme(), [secret], req)
    assert verdict.ok
    assert verdict.signed_at == 15_000


def test_independent_stripe_vector() -> None:
    expected = mac(SECRET.encode(), f"{NOW}.".encode() + BODY).hex()
    headers = {"Stripe-Signature": f"t={NOW},v1={expected},v0=deadbeef"}
    assert verify(StripeScheme(), [SECRET], request(headers))
    assert sign(StripeScheme(), SECRET, body=BODY, now_seconds=NOW) == {
        "Stripe-Signature": f"t={NOW},v1={expected}"
    }


def test_independent_github_vector() -> None:
    expected = "sha256=" + mac(SECRET.encode(), BODY).hex()
    headers = {"X-Hub-Signature-256": expected, "X-GitHub-Delivery": "d-1"}
    assert verify(GitHubScheme(), [SECRET], request(headers))


def test_independent_hubspot_vector_decodes_the_documented_characters_only() -> None:
    sent = "https://h.example.com/hook%3Aa%2Fb?x=%40%21%24%27%28%29%2a%2C%3b%3F&sp=a%20b%26c"
    signed_uri = "https://h.example.com/hook:a/b?x=@!$'()*,;?&sp=a%20b%26c"
    assert hubspot_signed_uri(sent) == signed_uri
    stamp = str(NOW * 1000)
    signature = mac(SECRET.encode(), b"POST" + signed_uri.encode() + BODY + stamp.encode())
    headers = {
        "X-HubSpot-Signature-v3": base64.b64encode(signature).decode(),
        "X-HubSpot-Request-Timestamp": stamp,
    }
    assert verify(HubSpotV3Scheme(), [SECRET], request(headers, url=sent))
    assert not verify(HubSpotV3Scheme(), [SECRET], request(headers, url=sent + "&y=1"))


def test_hubspot_decodes_once_not_recursively() -> None:
    assert hubspot_signed_uri("https://e.com/a%253A") == "https://e.com/a%253A"


@pytest.mark.parametrize(
    ("config", "headers_for"),
    [
        (
            HmacScheme(header="X-Sig", algorithm="sha1"),
            lambda: {"X-Sig": mac(SECRET.encode(), BODY, "sha1").hex().upper()},
        ),
        (
            HmacScheme(header="X-Sig", algorithm="sha512", encoding="base64", prefix="sha512="),
            lambda: {
                "X-Sig": "sha512=" + base64.b64encode(mac(SECRET.encode(), BODY, "sha512")).decode()
            },
        ),
        (
            HmacScheme(header="X-Sig", timestamp_header="X-Ts"),
            lambda: {
                "X-Ts": str(NOW),
                "X-Sig": mac(SECRET.encode(), f"{NOW}.".encode() + BODY).hex(),
            },
        ),
        (
            HmacScheme(
                header="X-Sig",
                timestamp_header="X-Ts",
                timestamp_unit="ms",
                delivery_id_header="X-Id",
                signed_content="v0:{method}:{url}:{id}:{timestamp}:{body}",
            ),
            lambda: {
                "X-Ts": str(NOW * 1000),
                "X-Id": "evt_9",
                "X-Sig": mac(
                    SECRET.encode(),
                    f"v0:POST:{URL}:evt_9:{NOW * 1000}:".encode() + BODY,
                ).hex(),
            },
        ),
    ],
    ids=["sha1-hex-uppercase", "sha512-base64-prefix", "timestamp", "template"],
)
def test_independent_generic_hmac_vectors(config: HmacScheme, headers_for: Any) -> None:
    assert verify(config, [SECRET], request(headers_for()))


def test_shared_secret_compares_the_configured_header() -> None:
    config = SharedSecretScheme(header="Authorization", prefix="Bearer ")
    assert verify(config, [SECRET], request({"authorization": f"Bearer {SECRET}"}))
    wrong = verify(config, [SECRET], request({"authorization": f"Bearer {SECRET}x"}))
    assert wrong.reason is Reason.BAD_SIGNATURE
    no_prefix = verify(config, [SECRET], request({"authorization": SECRET}))
    assert no_prefix.reason is Reason.MALFORMED_SIGNATURE


# ---------------------------------------------------------------- behaviour of every scheme


@pytest.mark.parametrize("name", list(CONFIGS))
def test_sign_then_verify(name: str) -> None:
    config, headers = signed(name)
    verdict = verify(config, [CONFIGS[name][1]], request(headers))
    assert verdict.ok, str(verdict)
    assert verdict.key_index == 0
    assert bool(verdict) is True


@pytest.mark.parametrize("name", BODY_SIGNED)
def test_a_tampered_body_is_refused(name: str) -> None:
    config, headers = signed(name)
    verdict = verify(config, [CONFIGS[name][1]], request(headers, body=BODY + b" "))
    assert verdict.reason is Reason.BAD_SIGNATURE
    assert bool(verdict) is False


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_wrong_secret_is_refused(name: str) -> None:
    config, headers = signed(name)
    other = "whsec_" + base64.b64encode(b"z" * 32).decode() if name == "standard_webhooks" else "x"
    assert verify(config, [other], request(headers)).reason is Reason.BAD_SIGNATURE


@pytest.mark.parametrize("name", list(CONFIGS))
def test_rotated_secrets_either_one_matches(name: str) -> None:
    config, current = CONFIGS[name]
    previous = OLD_WHSEC if name == "standard_webhooks" else OLD_SECRET
    _, with_old = signed(name, secret=previous)
    _, with_new = signed(name, secret=current)
    assert verify(config, [current, previous], request(with_old)).key_index == 1
    assert verify(config, [current, previous], request(with_new)).key_index == 0
    assert not verify(config, [current], request(with_old))


@pytest.mark.parametrize("name", TIMESTAMPED)
@pytest.mark.parametrize(
    ("offset", "reason"),
    [
        (0, None),
        (300, None),
        (301, Reason.STALE_TIMESTAMP),
        (-300, None),
        (-301, Reason.FUTURE_TIMESTAMP),
        (86_400, Reason.STALE_TIMESTAMP),
    ],
)
def test_the_replay_window_is_300_seconds_both_ways(
    name: str, offset: int, reason: Reason | None
) -> None:
    config, headers = signed(name, at=NOW)
    verdict = verify(config, [CONFIGS[name][1]], request(headers, now=NOW + offset))
    assert verdict.reason is reason, str(verdict)
    if reason is None:
        assert verdict.signed_at == NOW


def test_hubspot_window_is_measured_in_milliseconds() -> None:
    config, headers = signed("hubspot_v3", at=NOW)
    assert verify(config, [SECRET], request(headers, now=NOW + 300.0))
    late = verify(config, [SECRET], request(headers, now=NOW + 300.001))
    assert late.reason is Reason.STALE_TIMESTAMP


def test_the_window_follows_the_configured_tolerance() -> None:
    config = StripeScheme(tolerance_seconds=30)
    headers = sign(config, SECRET, body=BODY, now_seconds=NOW)
    assert verify(config, [SECRET], request(headers, now=NOW + 30))
    assert verify(config, [SECRET], request(headers, now=NOW + 31)).reason is Reason.STALE_TIMESTAMP


def test_github_has_no_replay_window() -> None:
    config, headers = signed("github", at=NOW)
    assert verify(config, [SECRET], request(headers, now=NOW + 10 * 365 * 86_400))


def test_a_forged_stale_request_is_a_bad_signature_not_a_stale_one() -> None:
    config, headers = signed("stripe", at=NOW - 3600, secret="attacker")
    assert verify(config, [SECRET], request(headers)).reason is Reason.BAD_SIGNATURE


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("case", [str.lower, str.upper, str.title])
def test_header_names_are_case_insensitive(name: str, case: Any) -> None:
    config, headers = signed(name)
    recased = {case(k): v for k, v in headers.items()}
    assert verify(config, [CONFIGS[name][1]], request(recased))


def test_svix_header_names_are_accepted() -> None:
    config, headers = signed("standard_webhooks")
    svix = {k.replace("webhook-", "svix-"): v for k, v in headers.items()}
    assert verify(config, [WHSEC], request(svix))
    assert delivery_id(config, request(svix)) == headers["webhook-id"]


def test_standard_webhooks_accepts_any_matching_entry() -> None:
    config, headers = signed("standard_webhooks")
    junk = "v1," + base64.b64encode(b"\x01" * 32).decode()
    headers["webhook-signature"] = " ".join(
        [junk, "v1a,AAAA", "v2," + headers["webhook-signature"][3:], headers["webhook-signature"]]
    )
    assert verify(config, [WHSEC], request(headers))
    headers["webhook-signature"] = f"{junk}  v1,not-base64!"
    assert verify(config, [WHSEC], request(headers)).reason is Reason.BAD_SIGNATURE


def test_stripe_accepts_any_v1_and_ignores_v0() -> None:
    config, headers = signed("stripe")
    good = headers["Stripe-Signature"].split("v1=")[1]
    wrong = "0" * 64
    headers["Stripe-Signature"] = f"t={NOW}, v1={wrong}, v0={good}, v1={good}"
    assert verify(config, [SECRET], request(headers))
    headers["Stripe-Signature"] = f"t={NOW},v1={wrong},v0={good}"
    assert verify(config, [SECRET], request(headers)).reason is Reason.BAD_SIGNATURE


MALFORMED: list[tuple[str, dict[str, str], Reason]] = [
    ("standard_webhooks", {}, Reason.MISSING_SIGNATURE),
    (
        "standard_webhooks",
        {"webhook-signature": "v1,x", "webhook-timestamp": "1"},
        Reason.MISSING_ID,
    ),
    (
        "standard_webhooks",
        {"webhook-signature": "v1,x", "webhook-id": "m"},
        Reason.MISSING_TIMESTAMP,
    ),
    (
        "standard_webhooks",
        {"webhook-signature": "v1,x", "webhook-id": "m", "webhook-timestamp": "17e8"},
        Reason.MALFORMED_TIMESTAMP,
    ),
    (
        "standard_webhooks",
        {"webhook-signature": "v1,x", "webhook-id": "m", "webhook-timestamp": "-5"},
        Reason.MALFORMED_TIMESTAMP,
    ),
    (
        "standard_webhooks",
        {"webhook-signature": "v1a,AAAA v2,AAAA", "webhook-id": "m", "webhook-timestamp": "1"},
        Reason.MALFORMED_SIGNATURE,
    ),
    (
        "standard_webhooks",
        {"webhook-signature": "v1,AAAA", "webhook-id": "m", "webhook-timestamp": "1"},
        Reason.MALFORMED_SIGNATURE,
    ),
    ("standard_webhooks", {"webhook-signature": "   "}, Reason.MISSING_SIGNATURE),
    ("stripe", {}, Reason.MISSING_SIGNATURE),
    ("stripe", {"Stripe-Signature": "v1=" + "0" * 64}, Reason.MISSING_TIMESTAMP),
    ("stripe", {"Stripe-Signature": "t=abc,v1=" + "0" * 64}, Reason.MALFORMED_TIMESTAMP),
    ("stripe", {"Stripe-Signature": "t=1,t=2,v1=" + "0" * 64}, Reason.MALFORMED_TIMESTAMP),
    ("stripe", {"Stripe-Signature": "t=1"}, Reason.MALFORMED_SIGNATURE),
    ("stripe", {"Stripe-Signature": "t=1,v1=zz"}, Reason.MALFORMED_SIGNATURE),
    ("stripe", {"Stripe-Signature": "t=1,v1=" + "0" * 62}, Reason.MALFORMED_SIGNATURE),
    ("stripe", {"Stripe-Signature": ",,,="}, Reason.MISSING_TIMESTAMP),
    ("github", {}, Reason.MISSING_SIGNATURE),
    ("github", {"X-Hub-Signature-256": "0" * 64}, Reason.MALFORMED_SIGNATURE),
    ("github", {"X-Hub-Signature-256": "sha1=" + "0" * 40}, Reason.MALFORMED_SIGNATURE),
    ("github", {"X-Hub-Signature-256": "sha256=" + "00 " * 32}, Reason.MALFORMED_SIGNATURE),
    ("github", {"X-Hub-Signature-256": "sha256=g" + "0" * 63}, Reason.MALFORMED_SIGNATURE),
    ("hubspot_v3", {}, Reason.MISSING_SIGNATURE),
    ("hubspot_v3", {"X-HubSpot-Signature-v3": "x"}, Reason.MISSING_TIMESTAMP),
    (
        "hubspot_v3",
        {"X-HubSpot-Signature-v3": "x", "X-HubSpot-Request-Timestamp": "1.5e12"},
        Reason.MALFORMED_TIMESTAMP,
    ),
    (
        "hubspot_v3",
        {"X-HubSpot-Signature-v3": "not base64", "X-HubSpot-Request-Timestamp": "1"},
        Reason.MALFORMED_SIGNATURE,
    ),
    ("hmac", {}, Reason.MISSING_SIGNATURE),
    ("hmac", {"X-Signature": "é" * 64}, Reason.MALFORMED_SIGNATURE),
    ("hmac_timestamped", {"X-Signature": "v1=AAAA"}, Reason.MISSING_TIMESTAMP),
    ("hmac_timestamped", {"X-Signature": "v1=A", "X-Timestamp": "١٢٣"}, Reason.MALFORMED_TIMESTAMP),
    ("hmac_timestamped", {"X-Signature": "AAAA", "X-Timestamp": "1"}, Reason.MALFORMED_SIGNATURE),
    ("shared_secret", {}, Reason.MISSING_SIGNATURE),
]


@pytest.mark.parametrize(("name", "headers", "reason"), MALFORMED)
def test_malformed_headers_get_a_reason_not_an_exception(
    name: str, headers: dict[str, str], reason: Reason
) -> None:
    config, secret = CONFIGS[name]
    assert verify(config, [secret], request(headers)).reason is reason


SIGNATURE_HEADERS = {
    "standard_webhooks": ("webhook-signature", "webhook-timestamp", "webhook-id"),
    "stripe": ("Stripe-Signature",),
    "github": ("X-Hub-Signature-256",),
    "hubspot_v3": ("X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp"),
    "hmac": ("X-Signature",),
    "hmac_timestamped": ("X-Signature", "X-Timestamp"),
    "shared_secret": ("X-Webhook-Token",),
}


@given(
    name=st.sampled_from(list(CONFIGS)),
    values=st.lists(st.text(max_size=80), min_size=3, max_size=3),
    url=st.text(max_size=40),
)
def test_arbitrary_header_values_never_raise_or_pass(
    name: str, values: list[str], url: str
) -> None:
    config, secret = CONFIGS[name]
    headers = dict(zip(SIGNATURE_HEADERS[name], values, strict=False))
    verdict = verify(config, [secret], request(headers, url=url))
    assert isinstance(verdict, Verdict)
    assert not verdict.ok


@given(
    name=st.sampled_from(BODY_SIGNED),
    body=st.binary(min_size=1, max_size=256),
    data=st.data(),
)
def test_any_single_byte_change_to_the_body_fails(name: str, body: bytes, data: Any) -> None:
    config, headers = signed(name, body=body)
    secret = CONFIGS[name][1]
    assert verify(config, [secret], request(headers, body=body))
    index = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    replacement = data.draw(
        st.integers(min_value=0, max_value=255).filter(lambda b: b != body[index])
    )
    changed = body[:index] + bytes([replacement]) + body[index + 1 :]
    assert verify(config, [secret], request(headers, body=changed)).reason is Reason.BAD_SIGNATURE


# ---------------------------------------------------------------- secrets


def test_failures_never_repeat_a_secret_or_a_signature() -> None:
    verdicts: list[tuple[Verdict, list[str]]] = []
    for name, (config, secret) in CONFIGS.items():
        _, headers = signed(name)
        sensitive = [secret, *headers.values(), BODY.decode()]
        sensitive += [part for v in headers.values() for part in v.replace(",", "=").split("=")]
        sensitive = [s for s in sensitive if len(s) >= 8 and not s.isdigit()]
        cases = [
            request(headers, body=BODY + b"!"),
            request(headers, now=NOW + 3600),
            request(headers, now=NOW - 3600),
            request({k: v[:-2] for k, v in headers.items()}),
            request({k: v + "x" for k, v in headers.items()}),
            request({k: v for k, v in headers.items() if "imestamp" not in k}),
            request({k: v for k, v in headers.items() if k != "webhook-id"}),
            request({}),
        ]
        for req in cases:
            for secrets in ([secret], [secret + "x", secret], ["whsec_!!"], []):
                verdicts.append((verify(config, secrets, req), [*sensitive, *secrets]))
    failures = [(v, s) for v, s in verdicts if not v.ok]
    assert {v.reason for v, _ in failures} == set(Reason)
    for verdict, sensitive in failures:
        rendered = f"{verdict} {verdict!r} {verdict.detail}"
        leaked = [s for s in sensitive if s and s in rendered]
        assert not leaked, rendered


def test_request_repr_hides_headers_and_body() -> None:
    _, headers = signed("github")
    text = repr(request(headers))
    assert headers["X-Hub-Signature-256"] not in text
    assert "contact.created" not in text


def test_secret_edge_cases() -> None:
    config, headers = signed("standard_webhooks")
    req = request(headers)
    assert verify(config, [], req).reason is Reason.NO_SECRET
    assert verify(config, ["whsec_***", ""], req).reason is Reason.INVALID_SECRET
    assert verify(config, ["whsec_***", WHSEC], req).key_index == 1
    assert verify(config, WHSEC, req).ok  # a lone string is one secret, not its characters
    with pytest.raises(SignatureConfigError) as raised:
        sign(config, "whsec_***secret***", body=BODY, now_seconds=NOW)
    assert "***secret***" not in str(raised.value)


def test_raw_key_format_never_decodes() -> None:
    config = StandardWebhooksScheme(key_format="raw")
    headers = sign(config, WHSEC, body=BODY, now_seconds=NOW, delivery_id="m1")
    expected = mac(WHSEC.encode(), f"m1.{NOW}.".encode() + BODY)
    assert headers["webhook-signature"] == "v1," + base64.b64encode(expected).decode()
    assert verify(config, [WHSEC], request(headers))
    assert not verify(StandardWebhooksScheme(), [WHSEC], request(headers))


# ---------------------------------------------------------------- configuration


def test_parse_every_scheme_by_name() -> None:
    extra = {"hmac": {"header": "X-Sig"}, "shared_secret": {"header": "X-Token"}}
    for name in SCHEMES:
        assert parse_scheme({"scheme": name, **extra.get(name, {})}).scheme == name


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scheme": "sha256-ish"}, "unknown signature scheme 'sha256-ish' (allowed: standard_"),
        ({}, "'scheme' is required (allowed:"),
        ({"scheme": "github", "secret": "x"}, "github.secret: Extra inputs are not permitted"),
        ({"scheme": "hmac"}, "hmac.header: Field required"),
        ({"scheme": "hmac", "header": "X Sig"}, "hmac.header"),
        ({"scheme": "hmac", "header": "X", "algorithm": "md5"}, "hmac.algorithm"),
        ({"scheme": "stripe", "tolerance_seconds": 0}, "stripe.tolerance_seconds"),
        ({"scheme": "hmac", "header": "X", "signed_content": "{ts}.{body}"}, "unknown placeholder"),
        ({"scheme": "hmac", "header": "X", "signed_content": "{body!r}"}, "unknown placeholder"),
        ({"scheme": "hmac", "header": "X", "signed_content": "{body"}, "signed_content"),
        ({"scheme": "hmac", "header": "X", "signed_content": "x"}, "{body} exactly once"),
        (
            {"scheme": "hmac", "header": "X", "signed_content": "{timestamp}.{body}"},
            "go together",
        ),
        (
            {"scheme": "hmac", "header": "X", "timestamp_header": "T", "signed_content": "{body}"},
            "go together",
        ),
        ({"scheme": "hmac", "header": "X", "signed_content": "{id}{body}"}, "delivery_id_header"),
    ],
)
def test_invalid_configurations_are_explained(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SignatureConfigError) as raised:
        parse_scheme(data)
    assert message in str(raised.value)


def test_hmac_without_a_delivery_id_header_value_is_missing_id() -> None:
    config = HmacScheme(header="X-Sig", delivery_id_header="X-Id", signed_content="{id}.{body}")
    headers = sign(config, SECRET, body=BODY, now_seconds=NOW, delivery_id="evt_1")
    assert verify(config, [SECRET], request(headers))
    del headers["X-Id"]
    assert verify(config, [SECRET], request(headers)).reason is Reason.MISSING_ID


@pytest.mark.parametrize(
    ("config", "headers", "expected"),
    [
        (StandardWebhooksScheme(), {"Webhook-Id": "msg_1"}, "msg_1"),
        (GitHubScheme(), {"X-GitHub-Delivery": "72d3162e"}, "72d3162e"),
        (StripeScheme(), {"Stripe-Signature": "t=1,v1=00"}, None),
        (HubSpotV3Scheme(), {}, None),
        (HmacScheme(header="X-Sig", delivery_id_header="X-Event-Id"), {"x-event-id": "e"}, "e"),
        (HmacScheme(header="X-Sig"), {"X-Event-Id": "e"}, None),
        (SharedSecretScheme(header="X-T", delivery_id_header="X-Id"), {"X-Id": "d"}, "d"),
    ],
)
def test_delivery_id_defaults(config: AnyScheme, headers: dict[str, str], expected: str) -> None:
    assert delivery_id(config, request(headers)) == expected
