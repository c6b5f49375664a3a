"""The client distribution on its own: installed into a fresh virtualenv
(httpx and pydantic only, at the versions uv.lock pins for it; no server),
running its README's examples against a live keepmem."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
from pathlib import Path

from tests import upstack
from tests.test_faults import QUICK

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "client"


def test_client_installs_alone_and_its_readme_runs(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    pins = tmp_path / "client.txt"
    uv = Path(sys.executable).parent / "uv"
    subprocess.run(
        [str(uv), "export", "--quiet", "--frozen", "--package", "keepmem-client",
         "--no-emit-workspace", "-o", str(pins)],
        cwd=ROOT, check=True, timeout=120,
    )  # fmt: skip
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--require-hashes", "-r", str(pins)], check=True, timeout=600)
    subprocess.run([*pip, str(CLIENT)], check=True, timeout=600)
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, check=True,
    ).stdout.lower()  # fmt: skip
    for server_only in ("fastapi", "sqlalchemy", "asyncpg", "keepmem==", "uvicorn"):
        assert server_only not in installed, server_only
    for pin in re.findall(r"^([\w.-]+==[^\s;\\]+)", pins.read_text(), re.M):
        assert pin.lower().replace("_", "-") in installed.replace("_", "-"), pin
    readme = (CLIENT / "README.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", readme, re.S)
    # the SDK's two, then LangChain's (the [langchain] extra: the suite's own
    # environment has it, the lone one above on purpose does not)
    assert len(examples) == 3
    assert "keepmem_client.langchain" in examples[2]
    stack = upstack.start(tmp_path / "stack", env=QUICK)  # `keepmem up`, as a user runs it
    try:
        _run_examples(python, examples[:2], stack.url, stack.key)
        _run_langchain_example(examples[2], stack.url, stack.key)
    finally:
        stack.stop()


def _run_examples(python: Path, examples: list[str], url: str, key: str) -> None:
    env = {"KEEPMEM_URL": url, "KEEPMEM_API_KEY": key, "KEEPMEM_PROJECT": "readme",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    for i, code in enumerate(examples):
        out = subprocess.run(
            [str(python), "-c", code], env=env, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert out.returncode == 0, (i, out.stderr[-2000:])
        if i == 0:
            lines = out.stdout.splitlines()
            assert lines[0] == "Use PKCE with S256 for every client"
            assert lines[1] == "OAuth2 uses PKCE for public clients"
            assert "20" in lines and "404 note_not_found" in lines
        else:
            assert "Tides turn every six hours" in out.stdout


def _run_langchain_example(code: str, url: str, key: str) -> None:
    env = {"KEEPMEM_URL": url, "KEEPMEM_API_KEY": key, "KEEPMEM_PROJECT": "readme",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Question: When does the ferry leave?" in out.stdout, out.stdout
