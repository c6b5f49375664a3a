"""keepmem: hosted, multi-tenant reflective memory service for AI agents."""

__version__ = "0.1.0"
