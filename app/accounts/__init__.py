"""Accounts: making tenants and projects (with their first key and seeded
system notes), resolving a key outside a request, and a tenant's usage for
the operator. Above the registry (``app.tenants``), keys (``app.auth``),
notes, usage and the audit log; erasure is ``app.erasure``."""
