"""The read-only system objects (User, Organization, UserRole, Profile, PermissionSet, Group,
RecordType) through a real Runtime and the real sfcrm AppService over real HTTP, on both
backends: SOQL, GET by id, describe, refused writes, no secrets, cross-org closed, and
simple-salesforce as a client (ADR 0074)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import SalesforceMalformedRequest, SalesforceResourceNotFound

from nexus.apps.sfcrm.app import create_app
from nexus.identity import service as identity
from nexus.identity.repository import IdentityRepository
from nexus.platform.db.engine import unit_of_work
from nexus.platform.settings import load_settings
from nexus.platform.tls import ensure_local_tls
from tests.conftest import Backend
from tests.integration.ui_stack import PASSWORD, UiStack, ui_stack
from tests.support.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
V = "/services/data/v59.0"
ACTIVE_USERS = ["Administrator", "Rep1", "Rep2", "Viewer"]  # by Name
SECRET_MARKERS = ("password", "hash", "token", "secret", "failed", "locked", "session")


@dataclass
class World:
    stack: UiStack
    https_url: str  # the same sfcrm AppService, over TLS (simple-salesforce speaks https only)
    ca: Path
    admin_id: str
    former_id: str  # an inactive user of org A
    other_org: str
    other_user: str
    other_token: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    var = Path(tmp_path_factory.mktemp("system-objects"))
    async with ui_stack(backend, var) as stack:
        async with unit_of_work(stack.sessions) as session:
            repo = IdentityRepository(session)
            admin = await repo.user_by_username("admin")
            assert admin is not None
            former = await identity.create_user(
                repo,
                org_id=stack.org_id,
                username="former@example.com",
                password=None,
                display_name="Former Employee",
            )
            await identity.set_user_active(repo, org_id=stack.org_id, user_id=former, active=False)
            other_org = await identity.create_org(repo, name="Other Org")
            other_user = await identity.create_user(
                repo,
                org_id=other_org,
                username="someone@other.example",
                password=PASSWORD,
                display_name="Someone Else",
            )
            client = await identity.create_client(
                repo,
                org_id=other_org,
                name="Other Org integration",
                redirect_uris=[],
                grant_types=["password"],
                scopes=["api"],
            )
        async with httpx.AsyncClient(base_url=stack.runtime_url, timeout=30) as http:
            signed_in = await http.post(
                "/services/oauth2/token",
                data={
                    "grant_type": "password",
                    "username": "someone@other.example",
                    "password": PASSWORD,
                    "client_id": client.client_id,
                    "client_secret": client.client_secret,
                },
            )
        assert signed_in.status_code == 200, signed_in.text
        other_token = signed_in.json()["access_token"]
        tls = ensure_local_tls(var)
        settings = load_settings(var_dir=var, runtime_api_url=stack.runtime_url)
        https = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
        async with serving(create_app(settings), **https) as https_url:
            yield World(
                stack,
                https_url,
                tls.ca_cert,
                str(admin["user_id"]),
                former,
                other_org,
                other_user,
                other_token,
            )


def _headers(w: World, user: str) -> dict[str, str]:
    if user == "other":
        return {"Authorization": f"Bearer {w.other_token}"}
    return w.stack.headers(user)


async def call(w: World, user: str, method: str, path: str, **kw: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=w.stack.sfcrm_url, timeout=30) as client:
        return await client.request(method, V + path, headers=_headers(w, user), **kw)


async def soql(w: World, user: str, query: str) -> dict[str, Any]:
    reply = await call(w, user, "GET", "/query", params={"q": query})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def test_users_of_the_org_by_soql_for_every_api_user(world: World) -> None:
    query = (
        "SELECT Id, Username, Name, Email, IsActive, ProfileId, UserRoleId FROM User "
        "WHERE IsActive = true ORDER BY Name LIMIT 10"
    )
    for user in ("admin", "viewer"):  # a read-only user sees the same users
        page = await soql(world, user, query)
        assert [r["Name"] for r in page["records"]] == ACTIVE_USERS
        admin = page["records"][0]
        assert admin["attributes"] == {"type": "User", "url": f"{V}/sobjects/User/{admin['Id']}"}
        assert admin["Id"] == world.admin_id
        assert admin["Username"] == "admin"
        assert admin["IsActive"] is True
        assert admin["UserRoleId"].startswith("00E")
        assert page["records"][1]["Email"] == "rep1@example.com"
        assert page["records"][1]["UserRoleId"] is None
    everyone = await soql(world, "viewer", "SELECT Name, IsActive FROM User ORDER BY Name")
    assert {"Name": "Former Employee", "IsActive": False} in [
        {k: r[k] for k in ("Name", "IsActive")} for r in everyone["records"]
    ]
    assert everyone["totalSize"] == len(ACTIVE_USERS) + 1
    counted = await soql(world, "rep1", "SELECT COUNT() FROM User WHERE IsActive = false")
    assert counted["totalSize"] == 1
    every = await call(world, "rep1", "GET", "/queryAll", params={"q": "SELECT Id FROM User"})
    assert every.status_code == 200, every.text
    assert every.json()["totalSize"] == len(ACTIVE_USERS) + 1


async def test_user_fields_filters_and_parent_paths(world: World) -> None:
    page = await soql(
        world,
        "rep1",
        "SELECT FirstName, LastName, Alias, UserType, TimeZoneSidKey, LocaleSidKey, "
        "LanguageLocaleKey, CreatedDate, LastLoginDate, Profile.Name, UserRole.Name "
        "FROM User WHERE Username LIKE 'FORMER%' OR Name = 'administrator' ORDER BY Name",
    )
    admin, former = page["records"]
    assert (former["FirstName"], former["LastName"], former["Alias"]) == (
        "Former",
        "Employee",
        "former",
    )
    assert (admin["FirstName"], admin["LastName"]) == (None, "Administrator")
    assert admin["UserType"] == "Standard"
    assert (admin["TimeZoneSidKey"], admin["LocaleSidKey"]) == ("UTC", "en_US")
    assert admin["Profile"]["Name"] == "System Administrator"
    assert former["Profile"]["Name"] == "Standard User"
    assert admin["UserRole"]["Name"] == "CEO"
    assert former["UserRole"] is None
    assert admin["LastLoginDate"] is not None  # the stack signed in as admin
    assert former["LastLoginDate"] is None
    created = datetime.strptime(admin["CreatedDate"], "%Y-%m-%dT%H:%M:%S.%f%z")
    assert abs(datetime.now(UTC) - created) < timedelta(minutes=10)  # UTC, whatever the server's
    assert admin["LastLoginDate"] >= admin["CreatedDate"]
    recent = await soql(world, "rep1", "SELECT COUNT() FROM User WHERE CreatedDate = LAST_N_DAYS:1")
    assert recent["totalSize"] == len(ACTIVE_USERS) + 1
    future = await soql(
        world, "rep1", "SELECT Id FROM User WHERE CreatedDate > 2999-01-01T00:00:00Z"
    )
    assert future["totalSize"] == 0
    by_profile = await soql(
        world, "rep1", "SELECT Name FROM User WHERE Profile.Name = 'System Administrator'"
    )
    assert [r["Name"] for r in by_profile["records"]] == ["Administrator"]


async def test_owner_paths_from_records_keep_working(world: World) -> None:
    created = await call(world, "rep1", "POST", "/sobjects/Account", json={"Name": "Owned"})
    assert created.status_code == 201, created.text
    page = await soql(
        world, "rep1", "SELECT Name, Owner.Name, Owner.Email FROM Account WHERE Name = 'Owned'"
    )
    owner = page["records"][0]["Owner"]
    assert (owner["Name"], owner["Email"]) == ("Rep1", "rep1@example.com")


async def test_organization_profiles_permission_sets_and_empty_objects(world: World) -> None:
    org = await soql(
        world,
        "viewer",
        "SELECT Id, Name, OrganizationType, InstanceName, IsSandbox, TimeZoneSidKey, "
        "DefaultLocaleSidKey, LanguageLocaleKey, NamespacePrefix, CreatedDate FROM Organization",
    )
    assert org["totalSize"] == 1
    row = org["records"][0]
    assert (row["Id"], row["Name"], row["IsSandbox"]) == (world.stack.org_id, "Nexus", False)
    assert row["NamespacePrefix"] is None
    assert row["OrganizationType"] == "Enterprise Edition"
    assert row["CreatedDate"]
    sets = await soql(world, "viewer", "SELECT Id, Name, Label FROM PermissionSet ORDER BY Name")
    assert [r["Name"] for r in sets["records"]] == ["Sfcrm_Test_Read_Only", "Sfcrm_Test_Sales"]
    assert all(r["Id"].startswith("0PS") for r in sets["records"])
    again = await soql(
        world, "admin", "SELECT Id FROM PermissionSet WHERE Name = 'Sfcrm_Test_Sales'"
    )
    assert again["records"][0]["Id"] == sets["records"][1]["Id"]  # ids are stable
    profiles = await soql(
        world, "viewer", "SELECT Id, Name, PermissionsModifyAllData FROM Profile ORDER BY Name"
    )
    assert [(r["Name"], r["PermissionsModifyAllData"]) for r in profiles["records"]] == [
        ("Standard User", False),
        ("System Administrator", True),
    ]
    users = await soql(world, "viewer", "SELECT ProfileId FROM User WHERE Username = 'admin'")
    assert users["records"][0]["ProfileId"] == profiles["records"][1]["Id"]
    roles = await soql(world, "viewer", "SELECT Name, ParentRoleId FROM UserRole")
    assert [(r["Name"], r["ParentRoleId"]) for r in roles["records"]] == [("CEO", None)]
    for empty in ("Group", "RecordType"):
        page = await soql(world, "viewer", f"SELECT Id, Name, DeveloperName FROM {empty}")
        assert (page["totalSize"], page["records"]) == (0, [])


async def test_get_by_id_with_and_without_fields(world: World) -> None:
    whole = await call(world, "viewer", "GET", f"/sobjects/User/{world.admin_id}")
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert body["attributes"]["type"] == "User"
    assert (body["Id"], body["Username"], body["Name"]) == (
        world.admin_id,
        "admin",
        "Administrator",
    )
    short = await call(
        world,
        "viewer",
        "GET",
        f"/sobjects/User/{world.admin_id[:15]}",
        params={"fields": "Email,Username"},
    )
    assert short.status_code == 200, short.text
    assert set(short.json()) == {"attributes", "Id", "Email", "Username"}
    org = await call(world, "viewer", "GET", f"/sobjects/Organization/{world.stack.org_id}")
    assert org.status_code == 200
    assert org.json()["Name"] == "Nexus"
    unknown = await call(
        world, "viewer", "GET", f"/sobjects/User/{world.admin_id}", params={"fields": "Nope"}
    )
    assert unknown.status_code == 400
    assert unknown.json()[0]["errorCode"] == "INVALID_FIELD"
    wrong_object = await call(world, "viewer", "GET", f"/sobjects/Organization/{world.admin_id}")
    assert wrong_object.status_code == 404
    assert wrong_object.json()[0]["errorCode"] == "NOT_FOUND"


async def test_describe_global_and_describe(world: World) -> None:
    listed = await call(world, "viewer", "GET", "/sobjects")
    assert listed.status_code == 200
    shapes = {s["name"]: s for s in listed.json()["sobjects"]}
    for name in ("User", "Organization", "UserRole", "Profile", "PermissionSet", "Group"):
        shape = shapes[name]
        assert (shape["queryable"], shape["retrieveable"]) == (True, True), name
        assert [shape[k] for k in ("createable", "updateable", "deletable")] == [False] * 3, name
        assert shape["replicateable"] is False, name  # no updated/deleted for them
    assert shapes["Account"]["replicateable"] is True  # sobjects/Account/updated answers
    assert shapes["User"]["keyPrefix"] == "005"
    described = await call(world, "viewer", "GET", "/sobjects/User/describe")
    assert described.status_code == 200, described.text
    fields = {f["name"]: f for f in described.json()["fields"]}
    for name in ("Username", "FirstName", "LastName", "Name", "Email", "Alias", "IsActive",
                 "TimeZoneSidKey", "LocaleSidKey", "LanguageLocaleKey", "ProfileId", "UserType",
                 "CreatedDate", "LastModifiedDate", "SystemModstamp"):  # fmt: skip
        assert name in fields, name
    assert "OwnerId" not in fields
    assert "IsDeleted" not in fields
    assert fields["Id"]["type"] == "id"
    assert (fields["IsActive"]["type"], fields["Email"]["type"]) == ("boolean", "email")
    assert fields["ProfileId"]["referenceTo"] == ["Profile"]
    assert fields["ProfileId"]["relationshipName"] == "Profile"
    assert fields["CreatedDate"]["type"] == "datetime"
    assert fields["Name"]["nameField"] is True
    assert not any(f["createable"] or f["updateable"] for f in fields.values())
    assert not [n for n in fields if any(m in n.lower() for m in SECRET_MARKERS)]


async def test_no_secret_is_a_column_or_a_value(world: World) -> None:
    for column in ("PasswordHash", "password_hash", "Password", "FailedLogins", "LockedUntil"):
        reply = await call(
            world, "admin", "GET", "/query", params={"q": f"SELECT {column} FROM User"}
        )
        assert reply.status_code == 400, column
        assert reply.json()[0]["errorCode"] == "INVALID_FIELD"
    page = await call(world, "admin", "GET", f"/sobjects/User/{world.admin_id}")
    assert not [k for k in page.json() if any(m in k.lower() for m in SECRET_MARKERS)]
    assert "$argon2" not in page.text


async def test_writes_are_refused_and_change_nothing(world: World) -> None:
    attempts = [
        ("POST", "/sobjects/User", {"Username": "new@example.com", "LastName": "New"}, "inserted"),
        ("PATCH", f"/sobjects/User/{world.admin_id}", {"Email": "evil@example.com"}, "updated"),
        ("DELETE", f"/sobjects/User/{world.admin_id}", None, "deleted"),
        ("DELETE", f"/sobjects/Organization/{world.stack.org_id}", None, "deleted"),
        ("POST", "/sobjects/PermissionSet", {"Name": "X", "Label": "X"}, "inserted"),
    ]
    for method, path, body, verb in attempts:
        reply = await call(world, "admin", method, path, json=body)
        assert reply.status_code == 400, (method, path, reply.text)
        error = reply.json()[0]
        assert error["errorCode"] == "INVALID_TYPE_FOR_OPERATION"
        assert error["message"] == f"entity type cannot be {verb}: {path.split('/')[2]}"
    still = await soql(world, "admin", f"SELECT Email FROM User WHERE Id = '{world.admin_id}'")
    assert still["records"][0]["Email"] != "evil@example.com"
    assert (await soql(world, "admin", "SELECT COUNT() FROM User"))["totalSize"] == 5


async def test_another_org_sees_only_its_own(world: World) -> None:
    page = await soql(world, "other", "SELECT Id, Username FROM User")
    assert [r["Id"] for r in page["records"]] == [world.other_user]
    pinned = await soql(world, "other", f"SELECT Id FROM User WHERE Id = '{world.admin_id}'")
    assert pinned["totalSize"] == 0
    org = await soql(world, "other", "SELECT Id, Name FROM Organization")
    assert [(r["Id"], r["Name"]) for r in org["records"]] == [(world.other_org, "Other Org")]
    assert (await soql(world, "other", "SELECT Id FROM PermissionSet"))["totalSize"] == 0
    theirs = await call(world, "other", "GET", f"/sobjects/User/{world.admin_id}")
    assert theirs.status_code == 404
    their_org = await call(world, "other", "GET", f"/sobjects/Organization/{world.stack.org_id}")
    assert their_org.status_code == 404
    ours = await call(world, "admin", "GET", f"/sobjects/User/{world.other_user}")
    assert ours.status_code == 404
    mine = await soql(world, "admin", f"SELECT Id FROM User WHERE Id = '{world.other_user}'")
    assert mine["totalSize"] == 0


def _salesforce(world: World) -> Salesforce:
    session = requests.Session()
    session.trust_env = False
    session.verify = str(world.ca)
    session.headers["Connection"] = "close"
    return Salesforce(
        instance_url=world.https_url,
        session_id=world.stack.tokens["viewer"],
        version="59.0",
        session=session,
    )


async def test_simple_salesforce_reads_users(world: World) -> None:
    sf = _salesforce(world)
    try:
        user = await asyncio.to_thread(sf.User.get, world.admin_id)
        assert (user["Username"], user["attributes"]["type"]) == ("admin", "User")
        result = await asyncio.to_thread(sf.query, "SELECT Id, Username FROM User")
        assert result["totalSize"] == len(ACTIVE_USERS) + 1
        assert world.admin_id in {r["Id"] for r in result["records"]}
        described = await asyncio.to_thread(sf.User.describe)
        assert described["name"] == "User"
        assert described["createable"] is False
        assert "Username" in {f["name"] for f in described["fields"]}
        with pytest.raises(SalesforceMalformedRequest) as refused:
            await asyncio.to_thread(sf.User.create, {"Username": "x@example.com"})
        assert refused.value.content[0]["errorCode"] == "INVALID_TYPE_FOR_OPERATION"
        with pytest.raises(SalesforceResourceNotFound):
            await asyncio.to_thread(sf.User.get, world.other_user)
    finally:
        sf.session.close()


async def test_semi_joins_and_owner_paths_through_simple_salesforce(world: World) -> None:
    created = await call(world, "rep1", "POST", "/sobjects/Account", json={"Name": "Paths"})
    assert created.status_code == 201, created.text
    sf = _salesforce(world)
    try:
        # `sf org display user`: the profile of one user, by a semi-join over User
        profile = await asyncio.to_thread(
            sf.query,
            "SELECT Name FROM Profile WHERE Id IN "
            f"(SELECT ProfileId FROM User WHERE Id = '{world.admin_id}')",
        )
        assert [r["Name"] for r in profile["records"]] == ["System Administrator"]
        owned = await asyncio.to_thread(
            sf.query,
            "SELECT Name, Owner.IsActive, Owner.Alias, Owner.Profile.Name FROM Account "
            "WHERE Name = 'Paths' AND OwnerId IN (SELECT Id FROM User WHERE IsActive = true)",
        )
        owner = owned["records"][0]["Owner"]
        assert (owner["IsActive"], owner["Alias"]) == (True, "rep1")
        assert owner["Profile"]["Name"] == "Standard User"
        assert owner["attributes"]["type"] == "User"
        grouped = await asyncio.to_thread(
            sf.query, "SELECT IsActive, COUNT(Id) FROM User GROUP BY IsActive ORDER BY IsActive"
        )
        assert [(r["IsActive"], r["expr0"]) for r in grouped["records"]] == [
            (False, 1),
            (True, len(ACTIVE_USERS)),
        ]
        standard = await asyncio.to_thread(sf.query, "SELECT FIELDS(STANDARD) FROM User LIMIT 10")
        assert {"Username", "IsActive", "ProfileId"} <= set(standard["records"][0])
    finally:
        sf.session.close()
    # another org's caller: the same queries answer nothing of this org
    theirs = await soql(
        world,
        "other",
        f"SELECT Name FROM Profile WHERE Id IN (SELECT ProfileId FROM User WHERE Id = "
        f"'{world.admin_id}')",
    )
    assert theirs["totalSize"] == 0


async def test_permission_set_assignments_through_simple_salesforce(world: World) -> None:
    sf = _salesforce(world)  # the viewer: not an administrator
    try:
        own = await asyncio.to_thread(
            sf.query,
            "SELECT Id, AssigneeId, PermissionSetId, PermissionSet.Name FROM "
            "PermissionSetAssignment",
        )
        assert [r["PermissionSet"]["Name"] for r in own["records"]] == ["Sfcrm_Test_Read_Only"]
        assignment = own["records"][0]
        assert assignment["attributes"]["type"] == "PermissionSetAssignment"
        read = await asyncio.to_thread(sf.PermissionSetAssignment.get, assignment["Id"])
        assert (read["AssigneeId"], read["PermissionSetId"]) == (
            assignment["AssigneeId"],
            assignment["PermissionSetId"],
        )
        described = await asyncio.to_thread(sf.PermissionSetAssignment.describe)
        fields = {f["name"]: f for f in described["fields"]}
        assert fields["PermissionSetId"]["referenceTo"] == ["PermissionSet"]
        assert described["createable"] is False
        # `sf org assign permset` creates one: refused, nothing is written
        with pytest.raises(SalesforceMalformedRequest) as refused:
            await asyncio.to_thread(
                sf.PermissionSetAssignment.create,
                {"AssigneeId": assignment["AssigneeId"], "PermissionSetId": "0PS000000000000AAA"},
            )
        assert refused.value.content[0]["errorCode"] == "INVALID_TYPE_FOR_OPERATION"
    finally:
        sf.session.close()
    every = await soql(world, "admin", "SELECT AssigneeId FROM PermissionSetAssignment")
    assert every["totalSize"] > 1  # an administrator reads everyone's
    others = await call(
        world, "rep1", "GET", f"/sobjects/PermissionSetAssignment/{assignment['Id']}"
    )
    assert others.status_code == 404  # the viewer's assignment is not rep1's to read
    other_org = await soql(world, "other", "SELECT Id FROM PermissionSetAssignment")
    assert other_org["totalSize"] == 0
