"""Grounding: long documents as passages (``chunking``, ``passages``),
citations of their spans that can be verified (``citations``), and
memories distilled from them with their provenance (``distill``)."""
