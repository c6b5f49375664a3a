"""A project's settings as one document: what each domain reads from the
project's settings (sanitising, the recency half-life, auto-tagging,
sessions, memories), read and changed through one API, every change audited.
It sits above the domains whose settings it composes; each domain keeps its
own reader and its own validation."""
