"""The hook's configuration, from the environment like the SDK's."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8765"
USER_AGENT = "keepmem-hook/0.1.0"


@dataclass(frozen=True, slots=True)
class HookEnv:
    """Where to send, as whom, and where to keep what is not sent yet."""

    url: str
    api_key: str | None
    project: str | None
    enabled: bool
    spool_dir: Path

    @classmethod
    def load(cls) -> HookEnv:
        """``KEEPMEM_URL`` / ``KEEPMEM_API_KEY`` / ``KEEPMEM_PROJECT`` /
        ``KEEPMEM_HOOKS`` / ``KEEPMEM_SPOOL_DIR``, then the defaults."""
        spool = os.environ.get("KEEPMEM_SPOOL_DIR") or str(
            Path.home() / ".cache" / "keepmem" / "spool"
        )
        hooks = os.environ.get("KEEPMEM_HOOKS", "").strip().lower()
        return cls(
            url=(os.environ.get("KEEPMEM_URL") or DEFAULT_URL).rstrip("/"),
            api_key=os.environ.get("KEEPMEM_API_KEY") or None,
            project=os.environ.get("KEEPMEM_PROJECT") or None,
            enabled=hooks not in {"off", "0", "false", "no", "disabled"},
            spool_dir=Path(spool).expanduser(),
        )


def headers(api_key: str | None, project: str | None) -> dict[str, str]:
    """keepmem's usual request headers."""
    out = {"User-Agent": USER_AGENT, "Content-Type": "application/json"}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    if project:
        out["X-Project"] = project
    return out
