"""Install, start and stop a real Open WebUI on loopback, for live tests and local development.

Importable (used by ``tests/live/conftest.py``) and a CLI::

    python -m devtools.openwebui_local install [--version V]
    python -m devtools.openwebui_local up [--version V] [--port P]   # then: source .env.local
    python -m devtools.openwebui_local status | env | down | clean

Each Open WebUI release lives in its own virtual environment under ``CACHE_ROOT/venvs/<version>`` (a few GB each;
``OPENWEBUI_RAG_MCP_CACHE`` overrides the root). Open WebUI runs fully offline: embeddings come from
``devtools.fake_embeddings`` on another loopback port, so no model is ever downloaded.

Only the standard library and httpx are used.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import mimetypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from devtools.cachelock import exclusive_lock

CACHE_ROOT = Path(os.environ.get("OPENWEBUI_RAG_MCP_CACHE", "~/.cache/openwebui-rag-mcp")).expanduser()
NEWEST = "0.12.4"
RELEASES = ("0.6.5", "0.6.43", "0.8.12", "0.10.2", "0.12.4")
TORCH_PIN = "torch==2.13.0"

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_DIR = REPO_ROOT / ".local-openwebui"
ENV_FILE = REPO_ROOT / ".env.local"

ADMIN_NAME = "Live Test Admin"
ADMIN_EMAIL = "admin@example.com"
STOP_GRACE_SECONDS = 15.0
PROCESS_TIMEOUT_SECONDS = 300.0
# 0.8.0 replaced a base's `access_control` JSON with `access_grants` and added POST /knowledge/{id}/access/update.
ACCESS_GRANTS = (0, 8, 0)
# 0.6.42 made GET /knowledge/ paged ({items,total}, 30 a page) and added GET /knowledge/{id}/files.
PAGED_LISTS = (0, 6, 42)


class OpenWebUIError(RuntimeError):
    """A non-2xx answer from Open WebUI (or an answer of the wrong kind, e.g. HTML instead of JSON)."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url} -> HTTP {status}: {body[:2000]}")
        self.method = method
        self.url = url
        self.status = status
        self.body = body


# --------------------------------------------------------------------------------------------------------------------
# Installation


def venv_dir(version: str) -> Path:
    """The virtual environment that holds Open WebUI ``version``."""
    return CACHE_ROOT / "venvs" / version


# Releases whose hybrid search cannot run as installed from PyPI today, and why.
HYBRID_BROKEN = {"0.6.5": "its environment cannot run hybrid search (pyarrow there needs NumPy 2, it has 1.26)"}


def has_external_reranker(version: str) -> bool:
    """Whether the installed release can call a reranker over HTTP (RAG_RERANKING_ENGINE=external; 0.6.43 can,
    0.6.5 cannot)."""
    found = venv_dir(version).glob("lib/python3*/site-packages/open_webui/retrieval/models/external.py")
    return any(found)


def hybrid_env(version: str, embed_port: int) -> dict[str, str]:
    """Hybrid search on (BM25 with the vectors), reranked by the fake embedding server's /v1/rerank where the release
    has an external reranker; without one (0.6.5) Open WebUI reranks by the embeddings' cosine similarity."""
    env = {"ENABLE_RAG_HYBRID_SEARCH": "true"}
    if has_external_reranker(version):
        env |= {
            "RAG_RERANKING_ENGINE": "external",
            "RAG_RERANKING_MODEL": "fake-rerank",
            "RAG_EXTERNAL_RERANKER_URL": f"http://127.0.0.1:{embed_port}/v1/rerank",
            "RAG_EXTERNAL_RERANKER_API_KEY": "fake",
        }
    return env


def is_installed(version: str) -> bool:
    return (venv_dir(version) / ".installed").exists()


def _log(message: str) -> None:
    print(f"[openwebui-local] {message}", file=sys.stderr, flush=True)


def _python311() -> str:
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if found is None:
        raise RuntimeError("Open WebUI needs Python 3.11, but no python3.11 is on PATH")
    return found


def _run_logged(cmd: Sequence[str], log: TextIO) -> None:
    log.write(f"\n$ {' '.join(cmd)}\n")
    log.flush()
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONUNBUFFERED="1")
    result = subprocess.run(list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` exited with code {result.returncode}")


def _install_lock(version: str) -> contextlib.AbstractContextManager[None]:
    lock_path = CACHE_ROOT / "locks" / f"{version}.lock"
    waiting = f"another process is installing Open WebUI {version}; waiting for it (lock {lock_path})"
    return exclusive_lock(lock_path, lambda: _log(waiting))


def install(version: str) -> Path:
    """Install Open WebUI ``version`` into its cached venv (idempotent) and return the venv path.

    Skips everything when the ``.installed`` marker exists. Concurrent callers serialise on a lock file. Installs the
    CPU build of torch first (found on this machine's disk), so that pip does not pull several GB of CUDA packages.
    """
    venv = venv_dir(version)
    marker = venv / ".installed"
    if marker.exists():
        return venv
    with _install_lock(version):
        if marker.exists():
            return venv
        log_path = CACHE_ROOT / "logs" / f"install-{version}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        _log(f"installing Open WebUI {version} into {venv} (first time: a few minutes, ~4 GB); log: {log_path}")
        started = time.monotonic()
        python = str(venv / "bin" / "python")
        try:
            with log_path.open("w", encoding="utf-8") as log:
                _run_logged([_python311(), "-m", "venv", str(venv)], log)
                _log(f"  [{time.monotonic() - started:5.0f} s] installing {TORCH_PIN} (CPU build)")
                _run_logged([python, "-m", "pip", "install", TORCH_PIN], log)
                _log(f"  [{time.monotonic() - started:5.0f} s] installing open-webui=={version}")
                _run_logged([python, "-m", "pip", "install", f"open-webui=={version}"], log)
        except (OSError, RuntimeError) as exc:
            raise RuntimeError(
                f"installing Open WebUI {version} failed: {exc}; last lines of {log_path}:\n{tail(log_path, 15)}"
            ) from exc
        if not (venv / "bin" / "open-webui").exists():
            raise RuntimeError(f"pip finished but {venv / 'bin' / 'open-webui'} is missing; see the log {log_path}")
        marker.touch()
        _log(f"installed Open WebUI {version} in {time.monotonic() - started:.0f} s")
    return venv


# --------------------------------------------------------------------------------------------------------------------
# Running


@dataclass
class Instance:
    """A running Open WebUI plus its fake embedding server."""

    version: str
    url: str
    api_key: str
    token: str
    admin_email: str
    admin_password: str
    data_dir: Path
    log_path: Path
    embed_url: str
    openwebui_pid: int
    embed_pid: int
    embed_log_path: Path | None = None
    openwebui_proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    embed_proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    secret_key: str = field(default="", repr=False)  # for restart(); not kept in the state file


PORT_ATTEMPTS = 3


def _lost_the_port(proc: subprocess.Popen[bytes], log_path: Path) -> bool:
    """Whether Open WebUI exited because its port was in use (uvicorn: "[Errno 98] ... address already in use"). One
    still starting while another process answers on its port is given a minute to find that out."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=60)
    return proc.poll() is not None and "address already in use" in tail(log_path).lower()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a (log) file, or a note that it is missing."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _http() -> httpx.Client:
    # trust_env=False: never send loopback traffic through a proxy from the environment.
    return httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0), trust_env=False)


def _is_json(response: httpx.Response) -> bool:
    return "json" in response.headers.get("content-type", "")


def _json_or_raise(response: httpx.Response) -> Any:
    request = response.request
    if not response.is_success:
        raise OpenWebUIError(request.method, str(request.url), response.status_code, response.text)
    if not _is_json(response):
        raise OpenWebUIError(
            request.method,
            str(request.url),
            response.status_code,
            f"expected JSON, got {response.headers.get('content-type')!r}: {response.text[:300]}",
        )
    return response.json()


def _start_embedding_server(workdir: Path, timeout: float = 30.0) -> tuple[subprocess.Popen[bytes], int, Path]:
    log_path = workdir / "fake_embeddings.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.fake_embeddings", "--host", "127.0.0.1", "--port", "0"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(encoding="utf-8", errors="replace")
        first = text.splitlines()[0] if text.splitlines() else ""
        if first.startswith("PORT=") and text.endswith("\n"):
            return proc, int(first.removeprefix("PORT=")), log_path
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    _terminate([proc.pid], [proc])
    raise RuntimeError(f"the fake embedding server did not report its port; its output:\n{tail(log_path)}")


def openwebui_env(data_dir: Path, static_dir: Path, embed_port: int, secret_key: str) -> dict[str, str]:
    """The environment for an offline Open WebUI (reference §9)."""
    env = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(name, None)
    env.update(
        {
            "DATA_DIR": str(data_dir),
            "STATIC_DIR": str(static_dir),
            "WEBUI_SECRET_KEY": secret_key,
            "WEBUI_AUTH": "True",
            "ENABLE_API_KEY": "True",
            "ENABLE_API_KEYS": "True",
            # 0.6.37 .. 0.6.4x check this permission even for admins when *creating* a key.
            "USER_PERMISSIONS_FEATURES_API_KEYS": "True",
            # The live tests' second, non-admin user creates its own bases (reference §9).
            "USER_PERMISSIONS_WORKSPACE_KNOWLEDGE_ACCESS": "True",
            "ENABLE_SIGNUP": "True",
            "ENV": "dev",
            "RAG_EMBEDDING_ENGINE": "openai",
            "RAG_OPENAI_API_BASE_URL": f"http://127.0.0.1:{embed_port}/v1",
            "RAG_OPENAI_API_KEY": "fake",
            "RAG_EMBEDDING_MODEL": "fake-embed",
            "RAG_EMBEDDING_BATCH_SIZE": "64",
            "RAG_EMBEDDING_CONCURRENT_REQUESTS": "4",
            "RAG_RERANKING_MODEL": "",
            "OFFLINE_MODE": "True",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "ENABLE_OLLAMA_API": "False",
            "ENABLE_OPENAI_API": "False",
            "ENABLE_VERSION_UPDATE_CHECK": "False",
            "ANONYMIZED_TELEMETRY": "False",
            "SCARF_NO_ANALYTICS": "true",
            "DO_NOT_TRACK": "true",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _wait_until_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> str:
    """Wait for ``/health`` and a JSON ``/api/version``; return the reported version."""
    deadline = time.monotonic() + timeout
    last_error = "no answer yet"
    with _http() as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"Open WebUI exited with code {proc.returncode} while starting; last log lines ({log_path}):\n"
                    f"{tail(log_path)}"
                )
            try:
                health = client.get(f"{url}/health", timeout=5.0)
                if health.status_code == 200:
                    version = client.get(f"{url}/api/version", timeout=5.0)
                    if version.status_code == 200 and _is_json(version):
                        reported: str = version.json()["version"]
                        return reported
                    last_error = f"/api/version -> {version.status_code} {version.headers.get('content-type')}"
                else:
                    last_error = f"/health -> {health.status_code}"
            except httpx.HTTPError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.5)
    raise RuntimeError(
        f"Open WebUI did not become ready at {url} within {timeout:.0f} s ({last_error}); "
        f"last log lines ({log_path}):\n{tail(log_path)}"
    )


def _create_admin(url: str, email: str, password: str) -> str:
    """Sign up the first user (who becomes admin), or sign in if it exists; return the JWT."""
    with _http() as client:
        signup = client.post(
            f"{url}/api/v1/auths/signup",
            json={"name": ADMIN_NAME, "email": email, "password": password, "profile_image_url": "/user.png"},
        )
        if signup.is_success and _is_json(signup):
            body = signup.json()
            if body.get("role") != "admin":
                raise RuntimeError(f"the signed-up user is not an admin (database not fresh?): {signup.text[:500]}")
            token: str = body["token"]
            return token
        signin = client.post(f"{url}/api/v1/auths/signin", json={"email": email, "password": password})
        if not signin.is_success:
            raise RuntimeError(
                f"could not create the admin: signup -> {signup.status_code} {signup.text[:500]}; "
                f"signin -> {signin.status_code} {signin.text[:500]}"
            )
        token = signin.json()["token"]
        return token


def _create_api_key(url: str, token: str) -> str:
    with _http() as client:
        response = client.post(f"{url}/api/v1/auths/api_key", headers={"Authorization": f"Bearer {token}"})
        body = _json_or_raise(response)
        api_key: str = body["api_key"]
        check = client.get(f"{url}/api/v1/knowledge/", headers={"Authorization": f"Bearer {api_key}"})
        _json_or_raise(check)
        return api_key


def start(
    version: str,
    workdir: Path,
    *,
    port: int | None = None,
    timeout: float = 240,
    extra_env: Mapping[str, str] | None = None,
    hybrid: bool = False,
) -> Instance:
    """Start Open WebUI ``version`` (must be installed) on 127.0.0.1 with a fresh DATA_DIR under ``workdir``.

    Also starts the fake embedding server, creates the admin (first signup) and an API key. Both processes run in
    their own sessions with output in log files under ``workdir``, so they outlive the caller until ``stop()``.
    ``workdir/data`` and ``workdir/static`` are wiped first. ``extra_env`` adds to (or overrides) the environment,
    e.g. a switch a test needs off its default. ``hybrid`` switches Open WebUI's hybrid search on, with the fake
    server's reranker (``hybrid_env``).
    """
    venv = venv_dir(version)
    executable = venv / "bin" / "open-webui"
    if not executable.exists():
        raise RuntimeError(f"Open WebUI {version} is not installed ({executable} is missing); run install() first")
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    static_dir = workdir / "static"
    for directory in (data_dir, static_dir):
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
    log_path = workdir / "openwebui.log"

    embed_proc, embed_port, embed_log = _start_embedding_server(workdir)
    secret_key = secrets.token_hex(32)
    env = openwebui_env(data_dir, static_dir, embed_port, secret_key) | dict(extra_env or {})
    if hybrid:
        env |= hybrid_env(version, embed_port)
    # A port found free may be taken before Open WebUI binds it (it binds some 20 s after it starts, while other
    # instances and their clients take ports): a port chosen here is chosen again then; a port given is not.
    attempts = 1 if port else PORT_ATTEMPTS
    for attempt in range(1, attempts + 1):
        chosen = port or free_port()
        url = f"http://127.0.0.1:{chosen}"
        try:
            proc = _spawn_openwebui(executable, chosen, workdir, env, log_path)
        except OSError:
            _terminate([embed_proc.pid], [embed_proc])
            raise
        try:
            reported = _wait_until_ready(url, proc, log_path, timeout)
            if reported != version:  # another Open WebUI may have taken the port while this one started
                raise RuntimeError(f"{url} reports version {reported!r}, expected {version!r}")
        except RuntimeError:
            if attempt < attempts and _lost_the_port(proc, log_path):
                _log(f"port {chosen} was taken before Open WebUI {version} could bind it; trying another")
                _terminate([proc.pid], [proc])  # what it started, if anything
                continue
            _terminate([proc.pid, embed_proc.pid], [proc, embed_proc])
            raise
        except BaseException:
            _terminate([proc.pid, embed_proc.pid], [proc, embed_proc])
            raise
        break
    try:
        password = f"Lt-{secrets.token_urlsafe(12)}-9a"
        token = _create_admin(url, ADMIN_EMAIL, password)
        api_key = _create_api_key(url, token)
    except BaseException as exc:
        _terminate([proc.pid, embed_proc.pid], [proc, embed_proc])
        if isinstance(exc, RuntimeError | httpx.HTTPError) and "last log lines" not in str(exc):
            raise RuntimeError(f"{exc}\nlast log lines ({log_path}):\n{tail(log_path)}") from exc
        raise
    return Instance(
        version=version,
        url=url,
        api_key=api_key,
        token=token,
        admin_email=ADMIN_EMAIL,
        admin_password=password,
        data_dir=data_dir,
        log_path=log_path,
        embed_url=f"http://127.0.0.1:{embed_port}/v1",
        openwebui_pid=proc.pid,
        embed_pid=embed_proc.pid,
        embed_log_path=embed_log,
        openwebui_proc=proc,
        embed_proc=embed_proc,
        secret_key=secret_key,
    )


def _spawn_openwebui(
    executable: Path, port: int, workdir: Path, env: dict[str, str], log_path: Path, *, append: bool = False
) -> subprocess.Popen[bytes]:
    with log_path.open("ab" if append else "wb") as log:
        return subprocess.Popen(
            [str(executable), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def restart(instance: Instance, *, kill: bool = False, timeout: float = 240) -> None:
    """Stop Open WebUI (SIGTERM, or SIGKILL with ``kill``) and start it again on the same port, data and secret, so
    its URL, users and API keys stay valid; the embedding server keeps running. Updates ``instance`` in place."""
    if not instance.secret_key:
        raise RuntimeError("this instance was not started by this process (its secret key is unknown)")
    if kill:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(instance.openwebui_pid, signal.SIGKILL)
        if instance.openwebui_proc is not None:
            instance.openwebui_proc.wait(timeout=30)
    else:
        _terminate([instance.openwebui_pid], [instance.openwebui_proc])
    workdir = instance.data_dir.parent
    port = int(instance.url.rsplit(":", 1)[1])
    env = openwebui_env(instance.data_dir, workdir / "static", _embed_port(instance), instance.secret_key)
    executable = venv_dir(instance.version) / "bin" / "open-webui"
    proc = _spawn_openwebui(executable, port, workdir, env, instance.log_path, append=True)
    instance.openwebui_pid, instance.openwebui_proc = proc.pid, proc
    _wait_until_ready(instance.url, proc, instance.log_path, timeout)


def _embed_port(instance: Instance) -> int:
    """The port of the instance's embedding server (Open WebUI keeps its address, so a restart needs the same one)."""
    return int(instance.embed_url.rsplit(":", 1)[1].split("/", 1)[0])


def start_copy(template: Instance, workdir: Path, *, timeout: float = 240) -> Instance:
    """Open WebUI on a copy of a stopped instance's data (its users and API key, bases and files), with its secret and
    its embedding server (Open WebUI keeps that server's address in its database), on a port of its own. Stop it with
    ``stop_openwebui``: the embedding server stays the template's."""
    workdir = workdir.resolve()
    data_dir, static_dir = workdir / "data", workdir / "static"
    shutil.copytree(template.data_dir, data_dir)
    static_dir.mkdir(parents=True, exist_ok=True)
    env = openwebui_env(data_dir, static_dir, _embed_port(template), template.secret_key)
    port = free_port()
    log_path = workdir / "openwebui.log"
    proc = _spawn_openwebui(venv_dir(template.version) / "bin" / "open-webui", port, workdir, env, log_path)
    copy = dataclasses.replace(
        template,
        url=f"http://127.0.0.1:{port}",
        data_dir=data_dir,
        log_path=log_path,
        openwebui_pid=proc.pid,
        openwebui_proc=proc,
    )
    try:
        _wait_until_ready(copy.url, proc, log_path, timeout)
    except BaseException:
        stop_openwebui(copy)
        raise
    return copy


def stop_openwebui(instance: Instance) -> None:
    """Stop Open WebUI alone; its embedding server goes on (``start_copy``'s instances share their template's)."""
    _terminate([instance.openwebui_pid], [instance.openwebui_proc])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) counts as gone
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _terminate(pids: Sequence[int], procs: Sequence[subprocess.Popen[bytes] | None] = ()) -> None:
    """SIGTERM the process groups led by ``pids``, wait, then SIGKILL what is left after the grace period."""
    by_pid = {proc.pid: proc for proc in procs if proc is not None}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for pid in pids:
        proc = by_pid.get(pid)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        else:
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # the leader may be gone while children of its group linger
        proc = by_pid.get(pid)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)


def stop(instance: Instance) -> None:
    """Stop Open WebUI and the embedding server (SIGTERM to their process groups, SIGKILL after 15 s)."""
    _terminate([instance.openwebui_pid, instance.embed_pid], [instance.openwebui_proc, instance.embed_proc])


# --------------------------------------------------------------------------------------------------------------------
# Seeding helpers (Open WebUI's own API, admin key; tolerant of releases 0.6.5 .. 0.12.4)


def client(inst: Instance, api_key: str | None = None) -> httpx.Client:
    """A sync httpx client for ``inst`` with the admin API key (or ``api_key``); use it as a context manager."""
    return httpx.Client(
        base_url=inst.url,
        headers={"Authorization": f"Bearer {api_key or inst.api_key}"},
        timeout=httpx.Timeout(120.0, connect=10.0),
        trust_env=False,
    )


def version_parts(version: str) -> tuple[int, int, int]:
    """``"0.6.43"`` -> ``(0, 6, 43)``; only for the releases this module starts (always plain versions)."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if match is None:
        raise ValueError(f"not a release version: {version!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def create_knowledge(
    inst: Instance, name: str, description: str, *, private: bool = False, api_key: str | None = None
) -> str:
    """Create a knowledge base; return its id.

    By default no sharing fields are sent (0.8+: private; before 0.8 an admin's base is then readable by every
    user). ``private=True`` makes it private on every release (``access_control: {}`` before 0.8). ``api_key``
    creates it as another user (see ``add_user``).
    """
    body: dict[str, Any] = {"name": name, "description": description}
    if private and version_parts(inst.version) < ACCESS_GRANTS:
        body["access_control"] = {}
    with client(inst, api_key) as http:
        answer = _json_or_raise(http.post("/api/v1/knowledge/create", json=body))
    if not isinstance(answer, dict) or not answer.get("id"):
        raise RuntimeError(f"unexpected answer from knowledge/create: {answer!r}")
    kb_id: str = answer["id"]
    return kb_id


def _guess_content_type(filename: str) -> str:
    if filename.lower().endswith((".md", ".markdown")):
        return "text/markdown"
    guessed, _ = mimetypes.guess_type(filename)
    return guessed or "text/plain"


def wait_processed(inst: Instance, file_id: str, timeout: float = 120.0) -> None:
    """Wait until an uploaded file is processed; raise if processing failed or takes longer than ``timeout``.

    Uses ``GET /api/v1/files/{id}/process/status`` (0.6.23+). Older releases answer that path with the HTML app page;
    they process during the upload, so the file record is checked instead.
    """
    deadline = time.monotonic() + timeout
    with client(inst) as http:
        while True:
            response = http.get(f"/api/v1/files/{file_id}/process/status")
            if response.is_success and _is_json(response):
                body = response.json()
                status = body.get("status") if isinstance(body, dict) else None
                if status == "completed":
                    return
                if status in ("failed", "not_found"):
                    raise RuntimeError(f"processing file {file_id} failed: {body!r}")
            elif response.is_success:
                # No status endpoint (<= 0.6.22): processing happened synchronously during the upload.
                record = _json_or_raise(http.get(f"/api/v1/files/{file_id}"))
                data = record.get("data") or {}
                if data.get("status") == "failed" or data.get("error"):
                    raise RuntimeError(f"processing file {file_id} failed: {data!r}")
                if data.get("content") is not None or data.get("status") == "completed":
                    return
            else:
                raise OpenWebUIError("GET", str(response.request.url), response.status_code, response.text)
            if time.monotonic() > deadline:
                raise RuntimeError(f"file {file_id} was not processed within {timeout:.0f} s (last: {response.text!r})")
            time.sleep(0.25)


def upload_text(
    inst: Instance, filename: str, text: str, metadata: dict[str, Any] | None = None, *, api_key: str | None = None
) -> str:
    """Upload ``text`` as a file (multipart ``POST /api/v1/files/``), wait until processed, return the file id."""
    files = {"file": (filename, text.encode("utf-8"), _guess_content_type(filename))}
    data = {"metadata": json.dumps(metadata)} if metadata is not None else None
    with client(inst, api_key) as http:
        body = _json_or_raise(http.post("/api/v1/files/", files=files, data=data))
    if not isinstance(body, dict) or not body.get("id"):
        raise RuntimeError(f"unexpected answer from the upload: {body!r}")
    if body.get("error"):  # <= 0.6.22: synchronous processing, errors come back as 200 + "error"
        raise RuntimeError(f"processing {filename} failed during upload: {body['error']}")
    file_id: str = body["id"]
    wait_processed(inst, file_id)
    return file_id


def add_file(inst: Instance, knowledge_id: str, file_id: str, *, api_key: str | None = None) -> None:
    """Link a processed file to a knowledge base (``POST /api/v1/knowledge/{id}/file/add``)."""
    with client(inst, api_key) as http:
        _json_or_raise(http.post(f"/api/v1/knowledge/{knowledge_id}/file/add", json={"file_id": file_id}))


def query_collection(inst: Instance, names: Sequence[str], query: str, k: int = 5) -> dict[str, Any]:
    """``POST /api/v1/retrieval/query/collection``; the raw JSON (``distances``/``documents``/``metadatas``)."""
    with client(inst) as http:
        body = _json_or_raise(
            http.post(
                "/api/v1/retrieval/query/collection",
                json={"collection_names": list(names), "query": query, "k": k},
            )
        )
    if not isinstance(body, dict):
        raise RuntimeError(f"unexpected answer from query/collection: {body!r}")
    return body


def knowledge_ids(inst: Instance, api_key: str | None = None) -> list[str]:
    """The ids of every base the key can read (``GET /api/v1/knowledge/``, every page), in Open WebUI's order."""
    ids: list[str] = []
    with client(inst, api_key) as http:
        if version_parts(inst.version) < PAGED_LISTS:
            return [item["id"] for item in _json_or_raise(http.get("/api/v1/knowledge/"))]
        page = 1
        while True:
            answer = _json_or_raise(http.get("/api/v1/knowledge/", params={"page": page}))
            ids.extend(item["id"] for item in answer["items"] if item["id"] not in ids)
            if not answer["items"] or len(ids) >= answer["total"]:
                return ids
            page += 1


def _written_to(item: dict[str, Any], knowledge_id: str) -> bool:
    meta = item.get("meta")
    return isinstance(meta, dict) and meta.get("collection_name") == knowledge_id


def files_of(inst: Instance, knowledge_id: str, api_key: str | None = None, *, indexed: bool = False) -> set[str]:
    """The ids of the files Open WebUI itself says the base holds (every page); with `indexed`, only those marked as
    written to the base's collection (`meta.collection_name`; 0.10 lists a self-linked upload before that)."""
    with client(inst, api_key) as http:
        if version_parts(inst.version) < PAGED_LISTS:
            base = _json_or_raise(http.get(f"/api/v1/knowledge/{knowledge_id}"))
            return {item["id"] for item in (base or {}).get("files") or []}
        found: set[str] = set()
        seen, page = 0, 1
        while True:
            answer = _json_or_raise(http.get(f"/api/v1/knowledge/{knowledge_id}/files", params={"page": page}))
            seen += len(answer["items"])
            found.update(item["id"] for item in answer["items"] if not indexed or _written_to(item, knowledge_id))
            if not answer["items"] or seen >= answer["total"]:
                return found
            page += 1


def file_ids(inst: Instance) -> set[str]:
    """Every file in Open WebUI as the admin sees them (``GET /api/v1/files/``: a list; pages of 50 since 0.8.11)."""
    found: set[str] = set()
    with client(inst) as http:
        page = 1
        while True:
            answer = _json_or_raise(http.get("/api/v1/files/", params={"page": page, "content": "false"}))
            if isinstance(answer, list):  # not paged: everything at once
                return {item["id"] for item in answer}
            before = len(found)
            found.update(item["id"] for item in answer["items"])
            if not answer["items"] or len(found) >= answer["total"] or len(found) == before:
                return found
            page += 1


def delete_knowledge(inst: Instance, knowledge_id: str) -> None:
    """``DELETE /api/v1/knowledge/{id}/delete`` as the admin (the base only; its files stay)."""
    with client(inst) as http:
        _json_or_raise(http.delete(f"/api/v1/knowledge/{knowledge_id}/delete"))


def retrieval_config(inst: Instance, update: dict[str, Any] | None = None) -> dict[str, Any]:
    """The admin's retrieval settings (``GET /api/v1/retrieval/config``), after applying ``update`` if given
    (``POST /api/v1/retrieval/config/update``; fields left out keep their value)."""
    with client(inst) as http:
        if update is not None:
            _json_or_raise(http.post("/api/v1/retrieval/config/update", json=update))
        answer = _json_or_raise(http.get("/api/v1/retrieval/config"))
    if not isinstance(answer, dict):
        raise RuntimeError(f"unexpected answer from retrieval/config: {answer!r}")
    return answer


# --------------------------------------------------------------------------------------------------------------------
# A second, non-admin user (reference §9: USER_PERMISSIONS_FEATURES_API_KEYS and
# USER_PERMISSIONS_WORKSPACE_KNOWLEDGE_ACCESS are set in openwebui_env, so it may hold a key and create bases)


@dataclass(frozen=True)
class User:
    """A non-admin Open WebUI user with its own JWT and API key."""

    url: str
    user_id: str
    name: str
    email: str
    password: str = field(repr=False)
    token: str = field(repr=False)
    api_key: str = field(repr=False)


def add_user(inst: Instance, name: str, email: str) -> User:
    """Create a user with role ``user`` through the admin (``POST /api/v1/auths/add``), sign it in and give it an
    API key; the key is checked on ``GET /api/v1/knowledge/``. Works on 0.6.5 through 0.12.4."""
    password = f"Lu-{secrets.token_urlsafe(12)}-7b"
    with client(inst) as http:
        _json_or_raise(
            http.post("/api/v1/auths/add", json={"name": name, "email": email, "password": password, "role": "user"})
        )
    with _http() as http:
        signed_in = _json_or_raise(
            http.post(f"{inst.url}/api/v1/auths/signin", json={"email": email, "password": password})
        )
    if signed_in.get("role") != "user":
        raise RuntimeError(f"the added user {email} signed in with role {signed_in.get('role')!r}, not 'user'")
    token: str = signed_in["token"]
    api_key = _create_api_key(inst.url, token)
    return User(
        url=inst.url,
        user_id=signed_in["id"],
        name=name,
        email=email,
        password=password,
        token=token,
        api_key=api_key,
    )


def _reader_group(inst: Instance, user: User) -> str:
    """A group (created once per user) whose only member is ``user``; its id."""
    name = f"readers-{user.user_id[:8]}"
    with client(inst) as http:
        groups = _json_or_raise(http.get("/api/v1/groups/"))
        existing = [group for group in groups if isinstance(group, dict) and group.get("name") == name]
        if existing:
            group_id: str = existing[0]["id"]
            return group_id
        # `permissions: {}`, not null: 0.6.5 fails every permission check of a member of a group whose permissions
        # are null (HTTP 500 on knowledge/create); {} grants nothing and leaves the defaults in charge.
        group = {"name": name, "description": "live-test readers", "permissions": {}}
        group_id = _json_or_raise(http.post("/api/v1/groups/create", json=group))["id"]
        added = http.post(f"/api/v1/groups/id/{group_id}/users/add", json={"user_ids": [user.user_id]})
        if not (added.is_success and _is_json(added)):  # before the users/add route (0.6.5): members in the update
            _json_or_raise(
                http.post(f"/api/v1/groups/id/{group_id}/update", json={**group, "user_ids": [user.user_id]})
            )
    return group_id


def share_read(inst: Instance, knowledge_id: str, user: User) -> None:
    """Let ``user`` read (not write) the admin's base ``knowledge_id``, then check it through the user's own key.

    0.8+: an ``access_grants`` entry through ``POST /api/v1/knowledge/{id}/access/update`` (0.12.4 ignores grants
    sent to ``/update``). Before 0.8: ``access_control`` through ``POST /api/v1/knowledge/{id}/update``, which needs
    name and description too and, before 0.6.41 (file list in ``data``), the unchanged ``data``. The read entry
    names the user and also a group holding only the user: 0.6.42 .. 0.7.x let a user open a base shared by user id
    but leave it out of ``GET /api/v1/knowledge/`` (its list filter reads only group ids).
    """
    files_before = files_of(inst, knowledge_id)
    with client(inst) as http:
        if version_parts(inst.version) >= ACCESS_GRANTS:
            grants = [{"principal_type": "user", "principal_id": user.user_id, "permission": "read"}]
            _json_or_raise(http.post(f"/api/v1/knowledge/{knowledge_id}/access/update", json={"access_grants": grants}))
        else:
            base = _json_or_raise(http.get(f"/api/v1/knowledge/{knowledge_id}"))
            access_control = {
                "read": {"group_ids": [_reader_group(inst, user)], "user_ids": [user.user_id]},
                "write": {"group_ids": [], "user_ids": []},
            }
            body = {"name": base["name"], "description": base["description"], "access_control": access_control}
            if "data" in base:  # /update overwrites `data` with what it is sent (null: the base forgets its files)
                body["data"] = base["data"]
            _json_or_raise(http.post(f"/api/v1/knowledge/{knowledge_id}/update", json=body))
    with client(inst, user.api_key) as http:
        seen = _json_or_raise(http.get(f"/api/v1/knowledge/{knowledge_id}"))
    if not isinstance(seen, dict) or seen.get("id") != knowledge_id:  # before 0.7: 200 null without read access
        raise RuntimeError(f"sharing {knowledge_id} with {user.email} did not work: the user reads {seen!r}")
    if knowledge_id not in knowledge_ids(inst, user.api_key):
        raise RuntimeError(f"sharing {knowledge_id} with {user.email} did not work: the user's list leaves it out")
    if files_of(inst, knowledge_id) != files_before:
        raise RuntimeError(
            f"sharing {knowledge_id} changed its documents: {files_before} -> {files_of(inst, knowledge_id)}"
        )


def unshare(inst: Instance, knowledge_id: str, user: User) -> None:
    """Make the admin's base ``knowledge_id`` private again (shared with nobody), then check through ``user``'s own
    key that Open WebUI no longer lists it for them. The same routes as ``share_read``: 0.8+ an empty
    ``access_grants``; before 0.8 ``access_control: {}`` through ``/update`` (with the unchanged ``data``)."""
    with client(inst) as http:
        if version_parts(inst.version) >= ACCESS_GRANTS:
            _json_or_raise(http.post(f"/api/v1/knowledge/{knowledge_id}/access/update", json={"access_grants": []}))
        else:
            base = _json_or_raise(http.get(f"/api/v1/knowledge/{knowledge_id}"))
            body = {"name": base["name"], "description": base["description"], "access_control": {}}
            if "data" in base:
                body["data"] = base["data"]
            _json_or_raise(http.post(f"/api/v1/knowledge/{knowledge_id}/update", json=body))
    if knowledge_id in knowledge_ids(inst, user.api_key):
        raise RuntimeError(f"unsharing {knowledge_id} from {user.email} did not work: the user still lists it")


# --------------------------------------------------------------------------------------------------------------------
# CLI


def _state_path(version: str) -> Path:
    return LOCAL_DIR / version / "state.json"


def _instance_to_state(inst: Instance) -> dict[str, Any]:
    return {
        "version": inst.version,
        "url": inst.url,
        "api_key": inst.api_key,
        "token": inst.token,
        "admin_email": inst.admin_email,
        "admin_password": inst.admin_password,
        "data_dir": str(inst.data_dir),
        "log_path": str(inst.log_path),
        "embed_url": inst.embed_url,
        "embed_log_path": str(inst.embed_log_path) if inst.embed_log_path else None,
        "openwebui_pid": inst.openwebui_pid,
        "embed_pid": inst.embed_pid,
    }


def _instance_from_state(state: dict[str, Any]) -> Instance:
    return Instance(
        version=state["version"],
        url=state["url"],
        api_key=state["api_key"],
        token=state["token"],
        admin_email=state["admin_email"],
        admin_password=state["admin_password"],
        data_dir=Path(state["data_dir"]),
        log_path=Path(state["log_path"]),
        embed_url=state["embed_url"],
        openwebui_pid=int(state["openwebui_pid"]),
        embed_pid=int(state["embed_pid"]),
        embed_log_path=Path(state["embed_log_path"]) if state.get("embed_log_path") else None,
    )


def _load_states() -> list[Instance]:
    instances: list[Instance] = []
    if not LOCAL_DIR.exists():
        return instances
    for path in sorted(LOCAL_DIR.glob("*/state.json")):
        try:
            instances.append(_instance_from_state(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError) as exc:
            _log(f"ignoring unreadable {path}: {exc}")
    return instances


def _process_matches(pid: int, needle: str) -> bool:
    """True if ``pid`` is alive and its command line mentions ``needle`` (guards against reused pids)."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return needle in cmdline


def _owned_pids(inst: Instance) -> list[int]:
    pids = []
    if _process_matches(inst.openwebui_pid, "open-webui"):
        pids.append(inst.openwebui_pid)
    if _process_matches(inst.embed_pid, "fake_embeddings"):
        pids.append(inst.embed_pid)
    return pids


def is_healthy(inst: Instance) -> bool:
    """True if the instance answers ``/health`` and accepts its API key."""
    try:
        with client(inst) as http:
            if http.get("/health", timeout=5.0).status_code != 200:
                return False
            response = http.get("/api/v1/knowledge/", timeout=10.0)
            return response.is_success and _is_json(response)
    except httpx.HTTPError:
        return False


def env_lines(inst: Instance) -> str:
    return f"export OPENWEBUI_URL={inst.url}\nexport OPENWEBUI_API_KEY={inst.api_key}\n"


def _write_env_file(inst: Instance) -> None:
    ENV_FILE.write_text(
        f"# written by `python -m devtools.openwebui_local up` (Open WebUI {inst.version}); source it\n"
        + env_lines(inst),
        encoding="utf-8",
    )


def _cmd_install(args: argparse.Namespace) -> int:
    venv = install(args.version)
    print(f"Open WebUI {args.version} is installed in {venv}")
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    version: str = args.version
    state_path = _state_path(version)
    if state_path.exists():
        previous = _instance_from_state(json.loads(state_path.read_text(encoding="utf-8")))
        if _owned_pids(previous) and is_healthy(previous):
            _write_env_file(previous)
            print(f"Open WebUI {version} is already up at {previous.url} (reusing it); wrote {ENV_FILE}")
            print(env_lines(previous), end="")
            return 0
        _log(f"stale state for {version}; stopping leftovers and starting afresh")
        _terminate(_owned_pids(previous))
        state_path.unlink()
    install(version)
    workdir = LOCAL_DIR / version
    started = time.monotonic()
    _log(f"starting Open WebUI {version} (first start of a release can take a minute)")
    inst = start(version, workdir, port=args.port, timeout=args.timeout)
    state_path.write_text(json.dumps(_instance_to_state(inst), indent=2) + "\n", encoding="utf-8")
    _write_env_file(inst)
    print(f"Open WebUI {version} is up at {inst.url} (started in {time.monotonic() - started:.0f} s)")
    print(f"  admin:      {inst.admin_email} / {inst.admin_password}")
    print(f"  API key:    {inst.api_key}")
    print(f"  logs:       {inst.log_path}")
    print(f"              {inst.embed_log_path}")
    print(f"  state:      {state_path}")
    print(f'Next: `source {ENV_FILE.name}` (or `eval "$(python -m devtools.openwebui_local env)"`),')
    print("      then run the MCP server or the tests; `python -m devtools.openwebui_local down` stops it.")
    return 0


def _selected(args: argparse.Namespace) -> list[Instance]:
    instances = _load_states()
    if args.version:
        instances = [inst for inst in instances if inst.version == args.version]
    return instances


def _cmd_down(args: argparse.Namespace) -> int:
    instances = _selected(args)
    if not instances:
        print("nothing is up")
    for inst in instances:
        pids = _owned_pids(inst)
        _terminate(pids)
        _state_path(inst.version).unlink(missing_ok=True)
        print(
            f"stopped Open WebUI {inst.version} ({inst.url})" if pids else f"Open WebUI {inst.version} was not running"
        )
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    args.version = None
    _cmd_down(args)
    if LOCAL_DIR.exists():
        shutil.rmtree(LOCAL_DIR)
        print(f"removed {LOCAL_DIR}")
    if ENV_FILE.exists():
        ENV_FILE.unlink()
        print(f"removed {ENV_FILE}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    instances = _selected(args)
    if not instances:
        print("nothing is up (no state in .local-openwebui/)")
        return 1
    code = 0
    for inst in instances:
        running = _owned_pids(inst)
        healthy = bool(running) and is_healthy(inst)
        code = code if healthy else 1
        print(
            f"Open WebUI {inst.version}: {'up' if healthy else 'DOWN'} at {inst.url} "
            f"(pids {inst.openwebui_pid}/{inst.embed_pid}, {'running' if running else 'not running'}); "
            f"log {inst.log_path}"
        )
    return code


DEMO_BASE = "Demo knowledge"
DEMO_DOCS = {
    "fruit.md": "# Fruit\n\nBananas are long yellow fruits rich in potassium. Apples are red or green.",
    "rivers.md": "# Rivers\n\nThe Volga is the longest river in Europe; the Danube flows through ten countries.",
    "moscow.md": "# Москва\n\nМосква — столица России и крупнейший город страны.",
    "beijing.md": "# 北京\n\n北京是中华人民共和国的首都，有三千多年的历史。",
}


def seed_demo(inst: Instance) -> str | None:
    """Create the demo base with a few documents, unless the instance already has one of that name."""
    with client(inst) as http:
        answer = http.get("/api/v1/knowledge/").json()
    bases = answer["items"] if isinstance(answer, dict) else answer
    if any(base.get("name") == DEMO_BASE for base in bases):
        return None
    knowledge_id = create_knowledge(inst, DEMO_BASE, "A few small documents to try the MCP server with")
    for filename, text in DEMO_DOCS.items():
        add_file(inst, knowledge_id, upload_text(inst, filename, text))
    return knowledge_id


def _cmd_seed(args: argparse.Namespace) -> int:
    instances = _selected(args)
    if not instances:
        print("nothing is up; run: python -m devtools.openwebui_local up", file=sys.stderr)
        return 1
    knowledge_id = seed_demo(instances[-1])
    if knowledge_id is None:
        print(f"{DEMO_BASE!r} already exists")
    else:
        print(f"created {DEMO_BASE!r} ({knowledge_id}) with {len(DEMO_DOCS)} documents")
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    instances = _selected(args)
    if not instances:
        print("# nothing is up; run: python -m devtools.openwebui_local up", file=sys.stderr)
        return 1
    print(env_lines(instances[-1]), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.openwebui_local", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help="install an Open WebUI release into its cached venv")
    p_install.add_argument("--version", default=NEWEST)
    p_install.set_defaults(func=_cmd_install)
    p_up = sub.add_parser("up", help="install if needed and start in the background; writes .env.local")
    p_up.add_argument("--version", default=NEWEST)
    p_up.add_argument("--port", type=int, default=None)
    p_up.add_argument("--timeout", type=float, default=PROCESS_TIMEOUT_SECONDS)
    p_up.set_defaults(func=_cmd_up)
    for name, func, help_text in (
        ("down", _cmd_down, "stop what .local-openwebui/*/state.json records"),
        ("status", _cmd_status, "show what is up"),
        ("env", _cmd_env, "print the export lines for the running instance"),
        ("seed", _cmd_seed, "add a small demo knowledge base (fruit, rivers, Moscow, Beijing) once"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--version", default=None)
        p.set_defaults(func=func)
    p_clean = sub.add_parser("clean", help="down, then remove .local-openwebui/ and .env.local")
    p_clean.set_defaults(func=_cmd_clean)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
