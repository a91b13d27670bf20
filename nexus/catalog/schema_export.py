"""Write the package format's JSON Schema (`python -m nexus.catalog.schema_export`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus.catalog.package import PackageSchema

SCHEMA_FILE = Path(__file__).with_name("package.schema.json")


def package_json_schema() -> dict[str, Any]:
    schema = PackageSchema.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://nexus.example/schemas/app-package-v1.json"
    schema["description"] = (
        "A Nexus App package: `manifest.yaml` (manifest) and the YAML files under "
        "`components/` (component_files, by path)."
    )
    return schema


def render() -> str:
    return json.dumps(package_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(render(), encoding="utf-8")
    print(SCHEMA_FILE)  # noqa: T201 - a developer command reports what it wrote
