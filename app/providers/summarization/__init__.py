"""Summarization providers."""
