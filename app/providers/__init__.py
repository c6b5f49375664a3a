"""Providers: embedding and summarization, each a small protocol plus a registry.

Hosted providers speak their vendors' HTTP wire formats through httpx;
offline defaults are real models and algorithms that run on this machine.
"""
