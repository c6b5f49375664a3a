"""Erasure of a project or a whole tenant, through each owner's service."""
