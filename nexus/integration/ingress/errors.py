"""Integration's domain errors (rendered by the one global handler)."""

from __future__ import annotations

from nexus.contracts.errors import PayloadTooLarge, Unauthorized


class SignatureRejected(Unauthorized):
    """401 with a generic message: the reason code is for logs and metrics, not the sender."""

    def __init__(self, reason: str) -> None:
        super().__init__("the webhook could not be authenticated")
        self.reason = reason


class WebhookTooLarge(PayloadTooLarge):
    pass
