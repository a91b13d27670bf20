"""What each system object is: its fields with their Salesforce names and types, and the ids
of the rows Nexus synthesizes (the two profiles, one row per permission set, one per
permission-set assignment).

A field's `type` is a Nexus field type (what describe reports, the dialect maps it onto the
Salesforce type); `kind` is how SOQL compares and converts it, as the query engine's system
fields do (`id`, `reference`, `boolean`, `datetime`, or text).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

from nexus.platform.ids import case_safe_suffix
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef

_KINDS = {"id": "id", "lookup": "reference", "checkbox": "boolean", "datetime": "datetime"}
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class SystemField:
    api_name: str
    label: str
    type: str = "text"  # a Nexus field type: id, text, email, picklist, checkbox, datetime, lookup
    nillable: bool = True
    unique: bool = False
    length: int | None = None
    reference_to: str | None = None
    relationship_name: str | None = None

    @property
    def key(self) -> str:
        """The column label in the object's source (`select`)."""
        return self.api_name.lower()

    @property
    def kind(self) -> str:
        return _KINDS.get(self.type, "text")


@dataclass(frozen=True)
class SystemObject:
    api_name: str
    label: str
    plural_label: str
    key_prefix: str
    fields: tuple[SystemField, ...] = field(default=())

    def field(self, name: str) -> SystemField | None:
        lowered = name.lower()
        return next((f for f in self.fields if f.key == lowered), None)

    def relationship(self, name: str) -> SystemField | None:
        """The reference field whose relationship is called `name` (`Profile` on User)."""
        lowered = name.lower()
        return next(
            (f for f in self.fields if (f.relationship_name or "").lower() == lowered), None
        )

    @cached_property
    def definition(self) -> ObjectDef:
        """An ObjectDef standing for the object where the query engine needs one (its name,
        key prefix and Name field); its fields are this object's, not metadata's."""
        return ObjectDef(
            api_name=self.api_name,
            label=self.label,
            plural_label=self.plural_label,
            key_prefix=self.key_prefix,
            sharing_model="Read",
            name_field=FieldDef(api_name="Name", label="Name", type="text", length=255),
        )


def _id(label: str = "Record ID") -> SystemField:
    return SystemField("Id", label, "id", nillable=False, unique=True, length=18)


def _text(name: str, label: str, length: int = 255, *, nillable: bool = True) -> SystemField:
    return SystemField(name, label, "text", nillable=nillable, length=length)


def _picklist(name: str, label: str) -> SystemField:
    return SystemField(name, label, "picklist", nillable=False, length=40)


def _flag(name: str, label: str) -> SystemField:
    return SystemField(name, label, "checkbox", nillable=False)


def _when(name: str, label: str, *, nillable: bool = False) -> SystemField:
    return SystemField(name, label, "datetime", nillable=nillable)


def _ref(name: str, label: str, to: str, relationship: str | None = None) -> SystemField:
    return SystemField(
        name, label, "lookup", length=18, reference_to=to, relationship_name=relationship
    )


USER = SystemObject(
    "User",
    "User",
    "Users",
    "005",
    (
        _id("User ID"),
        SystemField("Username", "Username", "text", nillable=False, unique=True, length=80),
        _text("LastName", "Last Name", 80, nillable=False),
        _text("FirstName", "First Name", 40),
        _text("Name", "Full Name", 121, nillable=False),
        SystemField("Email", "Email", "email", nillable=False, length=128),
        _text("Alias", "Alias", 8, nillable=False),
        _flag("IsActive", "Active"),
        _picklist("TimeZoneSidKey", "Time Zone"),
        _picklist("LocaleSidKey", "Locale"),
        _picklist("LanguageLocaleKey", "Language"),
        _picklist("EmailEncodingKey", "Email Encoding"),
        _ref("ProfileId", "Profile ID", "Profile", "Profile"),
        _ref("UserRoleId", "Role ID", "UserRole", "UserRole"),
        _picklist("UserType", "User Type"),
        _when("LastLoginDate", "Last Login", nillable=True),
        _when("CreatedDate", "Created Date"),
        _ref("CreatedById", "Created By ID", "User", "CreatedBy"),
        _when("LastModifiedDate", "Last Modified Date"),
        _ref("LastModifiedById", "Last Modified By ID", "User", "LastModifiedBy"),
        _when("SystemModstamp", "System Modstamp"),
    ),
)
ORGANIZATION = SystemObject(
    "Organization",
    "Organization",
    "Organizations",
    "00D",
    (
        _id("Organization ID"),
        _text("Name", "Name", 80, nillable=False),
        _picklist("OrganizationType", "Edition"),
        _text("InstanceName", "Instance Name", 5),
        _flag("IsSandbox", "Is Sandbox"),
        _picklist("TimeZoneSidKey", "Default Time Zone"),
        _picklist("DefaultLocaleSidKey", "Default Locale"),
        _picklist("LanguageLocaleKey", "Default Language"),
        _text("NamespacePrefix", "Namespace Prefix", 15),
        _when("TrialExpirationDate", "Trial Expiration Date", nillable=True),
        _when("CreatedDate", "Created Date"),
    ),
)
USER_ROLE = SystemObject(
    "UserRole",
    "Role",
    "Roles",
    "00E",
    (
        _id("Role ID"),
        _text("Name", "Name", 80, nillable=False),
        _text("DeveloperName", "Developer Name", 80, nillable=False),
        _ref("ParentRoleId", "Parent Role ID", "UserRole"),
        _text("RollupDescription", "Description", 80),
        _when("CreatedDate", "Created Date"),
    ),
)
PROFILE = SystemObject(
    "Profile",
    "Profile",
    "Profiles",
    "00e",
    (
        _id("Profile ID"),
        _text("Name", "Name", 255, nillable=False),
        _picklist("UserType", "User Type"),
        _text("Description", "Description", 255),
        _flag("PermissionsApiEnabled", "API Enabled"),
        _flag("PermissionsViewAllData", "View All Data"),
        _flag("PermissionsModifyAllData", "Modify All Data"),
    ),
)
PERMISSION_SET = SystemObject(
    "PermissionSet",
    "Permission Set",
    "Permission Sets",
    "0PS",
    (
        _id("Permission Set ID"),
        _text("Name", "Name", 80, nillable=False),
        _text("Label", "Label", 80, nillable=False),
        _text("Description", "Description", 255),
        _flag("IsOwnedByProfile", "Is Owned by Profile"),
        _ref("ProfileId", "Profile ID", "Profile", "Profile"),
        _picklist("Type", "Permission Set Type"),
        _text("NamespacePrefix", "Namespace Prefix", 15),
        _flag("PermissionsViewAllData", "View All Data"),
        _flag("PermissionsModifyAllData", "Modify All Data"),
    ),
)
GROUP = SystemObject(
    "Group",
    "Group",
    "Groups",
    "00G",
    (
        _id("Group ID"),
        _text("Name", "Name", 40, nillable=False),
        _text("DeveloperName", "Developer Name", 80),
        _picklist("Type", "Type"),
        SystemField("Email", "Email", "email", length=255),
        _ref("RelatedId", "Related ID", "UserRole"),
        _when("CreatedDate", "Created Date"),
    ),
)
PERMISSION_SET_ASSIGNMENT = SystemObject(
    "PermissionSetAssignment",
    "Permission Set Assignment",
    "Permission Set Assignments",
    "0Pa",
    (
        _id("Permission Set Assignment ID"),
        _ref("AssigneeId", "Assignee ID", "User", "Assignee"),
        _ref("PermissionSetId", "Permission Set ID", "PermissionSet", "PermissionSet"),
        _flag("IsActive", "Active"),
        _when("ExpirationDate", "Expiration Date", nillable=True),
        _when("SystemModstamp", "System Modstamp"),
    ),
)
RECORD_TYPE = SystemObject(
    "RecordType",
    "Record Type",
    "Record Types",
    "012",
    (
        _id("Record Type ID"),
        _text("Name", "Name", 80, nillable=False),
        _text("DeveloperName", "Record Type Name", 80, nillable=False),
        _picklist("SobjectType", "SObject Type Name"),
        _flag("IsActive", "Active"),
        _text("Description", "Description", 255),
        _text("NamespacePrefix", "Namespace Prefix", 15),
        _when("CreatedDate", "Created Date"),
    ),
)

SYSTEM_OBJECTS: dict[str, SystemObject] = {
    o.api_name.lower(): o
    for o in (
        USER,
        ORGANIZATION,
        USER_ROLE,
        PROFILE,
        PERMISSION_SET,
        PERMISSION_SET_ASSIGNMENT,
        GROUP,
        RECORD_TYPE,
    )
}
_BY_PREFIX = {o.key_prefix: o for o in SYSTEM_OBJECTS.values()}

#: The two profiles every org has: Nexus' administrator flag (full access) and everyone else,
#: whose access comes from permission sets only.
ADMIN_PROFILE, STANDARD_PROFILE = "System Administrator", "Standard User"


def system_object(name: str | None) -> SystemObject | None:
    return SYSTEM_OBJECTS.get((name or "").lower())


def as_system(obj: ObjectDef | None) -> SystemObject | None:
    """The system object `obj` stands for (not a metadata object of the same name)."""
    found = system_object(obj.api_name) if obj is not None else None
    return found if found is not None and found.definition is obj else None


def system_object_by_prefix(record_id: str) -> SystemObject | None:
    return _BY_PREFIX.get(record_id[:3])


def synthetic_id(prefix: str, org_id: str, name: str) -> str:
    """A stable 18-character id for a row Nexus derives rather than stores (a profile, a
    permission set): the same in every request, different in every org."""
    digest = hashlib.sha256(f"{org_id}\x00{prefix}\x00{name.lower()}".encode()).digest()
    id15 = prefix + "".join(_BASE62[b % 62] for b in digest[:12])
    return id15 + case_safe_suffix(id15)


def profile_id(org_id: str, name: str) -> str:
    return synthetic_id(PROFILE.key_prefix, org_id, name)


def permission_set_id(org_id: str, api_name: str) -> str:
    return synthetic_id(PERMISSION_SET.key_prefix, org_id, api_name)


def assignment_id(user_id: str, permission_set_id: str) -> str:
    """The stable id of a permission-set assignment, a function of the two ids it joins
    (`sources` computes the same in SQL): each of the 12 characters after the key prefix is
    the base62 sum of the user's and the permission set's characters there. For one
    permission set it is a bijection of the user ids (two users never share one), for one
    user two sets share one only if their ids do."""
    body = "".join(
        _BASE62[(_BASE62.index(u) + _BASE62.index(p)) % 62]
        for u, p in zip(user_id[3:15], permission_set_id[3:15], strict=True)
    )
    id15 = PERMISSION_SET_ASSIGNMENT.key_prefix + body
    return id15 + case_safe_suffix(id15)
