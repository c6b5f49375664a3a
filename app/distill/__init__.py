"""Distillation: memories made from chosen passages (citations, or parts
where a project keeps no text), written through the memories domain and
linked to what they came from by ``derived_from`` provenance edges."""
