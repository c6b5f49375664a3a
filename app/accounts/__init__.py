"""Accounts: making tenants and projects (with their first key and seeded
system notes), resolving a key outside a request, and erasing a project or
a tenant. Above the registry (``app.tenants``), keys (``app.auth``, OAuth),
notes, usage and the audit log."""
