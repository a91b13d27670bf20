"""Build hook: a wheel carries the browser CRM's build as package data.

Everything else is declared in pyproject.toml. `frontend/dist` (made by `make frontend`) is
copied into the wheel as `nexus/web/frontend/dist`, where the gateway serves it from an
installed package. A wheel built without it would serve "not built" pages, so the build
fails instead, unless NEXUS_WHEEL_WITHOUT_WEB=1 says that is intended. Editable installs
serve the source tree's `frontend/dist` directly and copy nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

#: The static bundles of the gateway's route table (`static = "name"`).
BUNDLES = ("frontend",)


class BuildPyWithBundles(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in BUNDLES:
            built = Path(name) / "dist"
            if not (built / "index.html").is_file():
                if os.environ.get("NEXUS_WHEEL_WITHOUT_WEB") == "1":
                    continue
                raise SystemExit(
                    f"{built}/index.html is missing: run `make frontend` before building the "
                    "wheel (or set NEXUS_WHEEL_WITHOUT_WEB=1 for a wheel without the web UI)"
                )
            target = Path(self.build_lib) / "nexus" / "web" / name / "dist"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(built, target)


setup(cmdclass={"build_py": BuildPyWithBundles})
