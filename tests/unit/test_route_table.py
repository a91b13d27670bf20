"""The static route table: shipped file, matching rules, and validation."""

from __future__ import annotations

import pytest

from nexus.contracts.roles import KNOWN_APPS, Role, upstream_name
from nexus.gateway.route_table import RouteTableError, load_route_table, parse_route_table


def test_the_shipped_table_reaches_every_role_but_the_gateway() -> None:
    table = load_route_table()
    assert table.version
    expected = {upstream_name(r) for r in Role if r not in (Role.GATEWAY, Role.APP)}
    expected |= {upstream_name(Role.APP, a) for a in KNOWN_APPS}
    assert set(table.upstreams) == expected


@pytest.mark.parametrize(
    ("path", "upstream"),
    [
        ("/services/data", "app:sfcrm"),
        ("/services/data/v60.0/query", "app:sfcrm"),
        ("/services/oauth2/token", "runtime-api"),
        ("/services/Soap/u/59.0", "runtime-api"),  # the partner API's login (ADR 0075)
        # the rest of `/services` is the dialect's: the App answers Salesforce's NOT_FOUND
        ("/services", "app:sfcrm"),
        ("/services/apexrest/x", "app:sfcrm"),
        ("/services/async/59.0/job", "app:sfcrm"),
        ("/.well-known/openid-configuration", "runtime-api"),
        ("/webhooks/github/pushes", "integration"),
        ("/_roles/app/sfcrm/version", "app:sfcrm"),
    ],
)
def test_longest_prefix_at_a_segment_boundary(path: str, upstream: str) -> None:
    route = load_route_table().match(path)
    assert route is not None
    assert route.upstream == upstream


@pytest.mark.parametrize("path", ["/admin/v1", "/admin/v1/runtimex", "/_roles/x"])
def test_paths_without_a_route(path: str) -> None:
    assert load_route_table().match(path) is None


@pytest.mark.parametrize("path", ["/", "/webhooksx", "/lightning/o/Account/list", "/assets/a.js"])
def test_page_paths_go_to_the_frontend_bundle(path: str) -> None:
    route = load_route_table().match(path)
    assert route is not None
    assert route.static == "frontend"
    assert route.upstream is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('prefix = "/x"', "exactly one of upstream and static"),
        ('prefix = "/x"\nupstream = "integration"\nstatic = "web"', "exactly one"),
        ('prefix = "/x"\nstatic = "../etc"', "bundle name"),
        ('prefix = "/x"\nstatic = "web"\nstrip_prefix = true', "static route takes no"),
        ('prefix = "/x"\nstatic = "web"\nexcept_under = ["/x/api/"]', "must start with"),
    ],
)
def test_static_routes_are_validated(entry: str, message: str) -> None:
    with pytest.raises(RouteTableError, match=message):
        parse_route_table(f'version = "1"\n[[route]]\n{entry}\n')


def test_strip_prefix() -> None:
    route = load_route_table().match("/_roles/catalog/version")
    assert route is not None
    assert route.upstream_path("/_roles/catalog/version") == "/version"
    assert route.upstream_path("/_roles/catalog") == "/"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('version = "1"\n[[route]]\nprefix = "/a"\nupstream = "mailer"\n', "unknown upstream"),
        ('version = "1"\n[[route]]\nprefix = "a"\nupstream = "catalog"\n', "must start with"),
        ('version = "1"\n[[route]]\nprefix = "/a/"\nupstream = "catalog"\n', "not end with"),
        (
            'version = "1"\n[[route]]\nprefix = "/a"\nupstream = "catalog"\n'
            '[[route]]\nprefix = "/a"\nupstream = "integration"\n',
            "duplicate prefix",
        ),
        ('[[route]]\nprefix = "/a"\nupstream = "catalog"\n', "version"),
        ('version = "1"\n[[route]]\nprefix = "/a"\nupstream = "catalog"\nextra = 1\n', "extra"),
        ("version = ", "not valid TOML"),
    ],
)
def test_invalid_tables_are_refused_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(RouteTableError, match=message):
        parse_route_table(text)


def test_webhooks_reach_the_integration_hooks_endpoint() -> None:
    route = load_route_table().match("/webhooks/crm-demo/contacts")
    assert route is not None
    assert route.upstream == "integration"
    assert route.upstream_path("/webhooks/crm-demo/contacts") == "/hooks/crm-demo/contacts"


def test_strip_prefix_and_upstream_prefix_exclude_each_other() -> None:
    text = 'version = "1"\n[[route]]\nprefix = "/a"\nupstream = "catalog"\n'
    with pytest.raises(RouteTableError, match="exclude each other"):
        parse_route_table(text + 'strip_prefix = true\nupstream_prefix = "/b"\n')
