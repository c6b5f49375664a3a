"""A registry per provider kind: names map to factories imported on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from app.providers.errors import MissingDependency, PermanentError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, tuple[str, str]] = {}

    def register(self, name: str, target: str, package: str = "") -> None:
        """``target`` is ``module:factory``; ``package`` names what to install if missing."""
        self._entries[name] = (target, package)

    @property
    def names(self) -> list[str]:
        return sorted(self._entries)

    def create(self, name: str, **options: Any) -> T:
        if name not in self._entries:
            raise PermanentError(
                f"unknown {self.kind} provider {name!r}; known: {', '.join(self.names)}"
            )
        target, package = self._entries[name]
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise MissingDependency(name, package or (exc.name or module_name)) from exc
        factory: Callable[..., T] = getattr(module, attr)
        return factory(**options)
