"""The Salesforce system objects (User, Organization, UserRole, Profile, PermissionSet, Group,
RecordType): read-only projections of Identity and of the org's metadata, queried, read and
described through the same Runtime use cases as records (ADR 0074)."""
