"""Shared vocabulary every domain speaks: note ids and project slugs
(``ids``), tag rules (``tags``), the change feed's kinds (``changes``), time
parsing (``timeutil``), what may be stored (``storable``), the opaque
cursors over shared sequences (``cursors``), redaction of
secrets and private spans (``redaction``) and the safe fetch of outside URLs
(``fetch``).

The kit imports no domain (tests/test_architecture.py checks): only
``app.errors``, ``app.settings`` and the providers' error types.
"""
