"""The OpenAPI document of the dialect (`GET /services/data/openapi.json`)."""

from __future__ import annotations

from typing import Any


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Nexus sfcrm REST", "version": "59.0"},
        "paths": {},
    }
