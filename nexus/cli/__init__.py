"""The composition root: the `nexus` command, one module per command group.

Only this package composes roles. Usage errors and invalid settings print exactly one line,
`nexus: error: ...`, and exit with status 2.

- `serve`: `nexus serve` (one role), `nexus up` (the local stack), `nexus healthcheck`
- `migrate`: `nexus migrate`, `nexus makemigration`
- `admin`: `nexus admin ...` (identity, workload bindings, outbound endpoints, secrets)
- `metadata`: `nexus metadata ...`, `nexus query`
- `catalog`: `nexus catalog ...` (App packages, the built-in Apps)
- `demo`: `nexus demo load`
- `integration`: `nexus integration apply-routes`, `nexus hooks ...`
- `work`: `nexus work stats|transfer`
- `common`: what several of them share (errors, engines, the stack's roles)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nexus import __version__
from nexus.cli import admin, catalog, demo, integration, metadata, migrate, serve, work
from nexus.cli.common import EXIT_USAGE, CliError, Parser
from nexus.platform.settings import SettingsError

__all__ = ["main", "make_parser"]


def make_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nexus", description="Nexus CRM platform")
    parser.add_argument("--version", action="version", version=f"nexus {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in (serve, migrate, admin, integration, work, catalog, demo, metadata):
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
        return int(args.handler(args))
    except (CliError, SettingsError) as exc:
        code = exc.code if isinstance(exc, CliError) else EXIT_USAGE
        print(f"nexus: error: {exc}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
