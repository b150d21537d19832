"""Several replicas of the Streamable HTTP transport behind nginx, with Redis, all on loopback.

What the replica tests (``tests/live/test_live_replicas.py``) start and stop, and what ``docs/deployment.md`` shows:

    callers --> nginx (one port, /mcp) --> openwebui-rag-mcp --transport streamable-http  (replica 1, port P1)
                                       --> openwebui-rag-mcp --transport streamable-http  (replica 2, port P2) ...
                                                  each with REDIS_URL --> redis-server (one port)

Every process runs in a session of its own with its output in a log file under the work directory, and is stopped
with SIGTERM to its process group (SIGKILL after a grace period). nginx and redis-server are Debian's packages
(``apt-get install nginx redis-server``; ``.ci/run`` installs them); a missing binary raises ``MissingBinary``
with that advice, so a test fails with it instead of skipping.

Importable, and a CLI for trying it by hand (runs until Ctrl-C)::

    OPENWEBUI_URL=http://127.0.0.1:8080 python -m devtools.replicas --replicas 2
    OPENWEBUI_URL=... python -m devtools.replicas --replicas 3 --no-redis   # per-process locks (the control)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devtools import binaries
from devtools.binaries import MissingBinary as MissingBinary  # re-exported: the live tests catch it here

SCRIPT = Path(sys.executable).with_name("openwebui-rag-mcp")
STOP_GRACE_SECONDS = 30.0
TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
INSTALL_ADVICE = "install Debian's packages: apt-get install -y nginx redis-server (.ci/run does this)"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
# nginx's upstream read timeout: longer than the slowest write (OPENWEBUI_PROCESS_TIMEOUT, 300 s by default, plus
# the time it may wait for the base's lock behind another write).
READ_TIMEOUT_SECONDS = 900


def find_binary(name: str) -> str:
    """The path of nginx or redis-server (`MissingBinary` with the advice to install them)."""
    return binaries.find_binary(name, INSTALL_ADVICE)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


@dataclass
class Process:
    """One process we started: its name, port and log file."""

    name: str
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] = field(repr=False)
    argv: tuple[str, ...] = field(default=(), repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int = signal.SIGTERM) -> None:
        """Send ``signum`` to the process group this process leads (only what we started)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; the exit code (None if it had to be killed)."""
        if not self.alive():
            return self.proc.returncode
        self.signal(signal.SIGTERM)
        code = self.wait(grace)
        if code is None:
            self.signal(signal.SIGKILL)
            self.wait(10)
        return code


def _spawn(
    name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str], port: int, *, append: bool = False
) -> Process:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab" if append else "wb") as log:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=log_path.parent,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Process(name, port, log_path, proc, tuple(argv), dict(env))


def respawn(process: Process, *, kill: bool = False) -> Process:
    """Stop ``process`` (SIGKILL to its group with ``kill``: no chance to clean up) and start the same command on the
    same port, its log appended to; wait for it with ``wait_ready`` or ``wait_redis``."""
    if kill:
        process.signal(signal.SIGKILL)
        process.wait(30)
    else:
        process.stop()
    return _spawn(process.name, process.argv, process.log_path, process.env, process.port, append=True)


def _wait_for(process: Process, ready: Callable[[], str | None], timeout: float) -> None:
    """Poll ``ready`` (None when ready, else what is still wrong) until it passes, the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(
                f"{process.name} exited with code {process.proc.returncode} while starting; its log "
                f"({process.log_path}):\n{tail(process.log_path)}"
            )
        try:
            problem = ready()
        except (OSError, httpx.HTTPError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            return
        last = problem
        time.sleep(0.1)
    process.stop(grace=5)
    raise RuntimeError(
        f"{process.name} was not ready within {timeout:.0f} s ({last}); its log ({process.log_path}):\n"
        f"{tail(process.log_path)}"
    )


def _http_ok(url: str) -> str | None:
    with httpx.Client(timeout=5.0, trust_env=False) as http:
        answer = http.get(url)
    return None if answer.status_code == 200 else f"{url} -> {answer.status_code} {answer.text[:200]}"


# -- the MCP server ---------------------------------------------------------------------------------------------------


def server_env(variables: Mapping[str, str]) -> dict[str, str]:
    """The environment of a server process: ours without proxies (everything is on loopback) and without any
    OPENWEBUI_* or REDIS_URL of our own, plus ``variables``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in _PROXY_VARIABLES and not name.startswith("OPENWEBUI_") and name != "REDIS_URL"
    }
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"})
    env.update(variables)
    return env


def spawn_server(variables: Mapping[str, str], log_path: Path, *, name: str = "openwebui-rag-mcp") -> Process:
    """``openwebui-rag-mcp --transport streamable-http --host 127.0.0.1 --port <free>`` with ``variables`` (at least
    OPENWEBUI_URL), started but not waited for (see ``wait_ready``)."""
    port = free_port()
    argv = [str(SCRIPT), "--transport", "streamable-http", "--host", "127.0.0.1", "--port", str(port)]
    return _spawn(name, argv, log_path, server_env(variables), port)


def wait_ready(process: Process, timeout: float = 60.0) -> None:
    """Wait until the server's ``/readyz`` answers 200 (it runs and Open WebUI answers it)."""
    _wait_for(process, lambda: _http_ok(f"{process.url}/readyz"), timeout)


def start_server(
    variables: Mapping[str, str], log_path: Path, *, name: str = "openwebui-rag-mcp", timeout: float = 60.0
) -> Process:
    """``spawn_server`` and ``wait_ready``."""
    process = spawn_server(variables, log_path, name=name)
    wait_ready(process, timeout)
    return process


# -- Redis ------------------------------------------------------------------------------------------------------------


def _redis_pong(port: int) -> str | None:
    with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
        sock.sendall(b"PING\r\n")
        answer = sock.recv(64)
    return None if answer.startswith(b"+PONG") else f"PING -> {answer!r}"


def start_redis(workdir: Path, *, timeout: float = 20.0) -> Process:
    """``redis-server`` on a free loopback port, in the foreground, with no persistence; returns once it PONGs."""
    binary = find_binary("redis-server")
    port = free_port()
    data = workdir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--daemonize",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data),
    ]
    process = _spawn("redis-server", argv, workdir / "redis.log", os.environ, port)
    wait_redis(process, timeout)
    return process


def wait_redis(process: Process, timeout: float = 20.0) -> None:
    """Wait until the redis-server of ``process`` answers PING."""
    _wait_for(process, lambda: _redis_pong(process.port), timeout)


# -- nginx ------------------------------------------------------------------------------------------------------------


def nginx_site(listen: str, upstreams: Sequence[int], *, max_body: str = "16m") -> str:
    """The upstream and server blocks: what ``docs/deployment.md`` shows (behind TLS there)."""
    servers = "\n".join(f"        server 127.0.0.1:{port} max_fails=1 fail_timeout=10s;" for port in upstreams)
    return f"""\
    upstream openwebui_rag_mcp {{
{servers}
        keepalive 16;
    }}

    server {{
        listen {listen};
        client_max_body_size {max_body};   # at least OPENWEBUI_MCP_MAX_BODY_BYTES (16 MiB by default)

        location /mcp {{
            proxy_pass http://openwebui_rag_mcp;
            proxy_http_version 1.1;            # keep-alive to the replicas
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;  # checked by the server: OPENWEBUI_MCP_ALLOWED_HOSTS
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_buffering off;               # progress notifications stream as server-sent events
            proxy_cache off;
            proxy_read_timeout {READ_TIMEOUT_SECONDS}s;         # longer than the slowest write
            proxy_send_timeout {READ_TIMEOUT_SECONDS}s;
        }}

        location = /healthz {{ proxy_pass http://openwebui_rag_mcp; }}
        location = /readyz {{ proxy_pass http://openwebui_rag_mcp; }}
    }}
"""


def nginx_conf(workdir: Path, listen_port: int, upstreams: Sequence[int]) -> str:
    """A whole nginx.conf for a private nginx under ``workdir`` (pid, logs and temp files there)."""
    # Run as root (as CI does), nginx's workers would be `nobody`, who cannot enter a root-only temp directory.
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
    temp = "\n".join(f"    {kind}_temp_path {workdir / 'temp' / kind};" for kind in TEMP_KINDS)
    return f"""\
{user}worker_processes 1;
pid {workdir / "nginx.pid"};
error_log {workdir / "error.log"} warn;
events {{ worker_connections 1024; }}

http {{
    log_format mcp '$remote_addr "$request" $status upstream=$upstream_addr mcp_method=$http_mcp_method '
                   'rt=$request_time';
    access_log {workdir / "access.log"} mcp;
{temp}

{nginx_site(f"127.0.0.1:{listen_port}", upstreams)}}}
"""


def start_nginx(workdir: Path, upstreams: Sequence[int], *, timeout: float = 20.0) -> Process:
    """nginx in the foreground on a free loopback port in front of ``upstreams``; returns once /healthz passes
    through it."""
    binary = find_binary("nginx")
    workdir.mkdir(parents=True, exist_ok=True)
    for kind in TEMP_KINDS:
        (workdir / "temp" / kind).mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_conf(workdir, port, upstreams), encoding="utf-8")
    base = [binary, "-c", str(conf), "-p", str(workdir), "-e", str(workdir / "error.log")]
    checked = subprocess.run([*base, "-t"], capture_output=True, text=True, timeout=30, check=False)
    if checked.returncode != 0:
        raise RuntimeError(f"nginx refused the configuration {conf}:\n{checked.stderr}")
    process = _spawn("nginx", [*base, "-g", "daemon off;"], workdir / "nginx.log", os.environ, port)
    _wait_for(process, lambda: _http_ok(f"{process.url}/healthz"), timeout)
    return process


def nginx_access(workdir: Path) -> list[str]:
    """nginx's access log lines (format ``mcp`` above: upstream address and the Mcp-Method header of each POST)."""
    path = workdir / "access.log"
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []


# -- the whole stack --------------------------------------------------------------------------------------------------


@dataclass
class Stack:
    workdir: Path
    redis: Process | None
    replicas: list[Process]
    nginx: Process

    @property
    def url(self) -> str:
        """The MCP endpoint, through nginx."""
        return f"{self.nginx.url}/mcp"

    def stop(self) -> None:
        """nginx first (no new requests), then the replicas (each finishes what it is serving), then Redis."""
        self.nginx.stop()
        for replica in self.replicas:
            replica.stop()
        if self.redis is not None:
            self.redis.stop()


def start_stack(workdir: Path, variables: Mapping[str, str], *, replicas: int = 2, redis: bool = True) -> Stack:
    """Redis (unless ``redis`` is false: per-process locks), ``replicas`` server processes with ``variables`` (plus
    REDIS_URL), and nginx in front. Both binaries are looked up first, so a missing one fails before anything
    starts."""
    find_binary("nginx")
    if redis:
        find_binary("redis-server")
    workdir.mkdir(parents=True, exist_ok=True)
    started: list[Process] = []
    try:
        store = start_redis(workdir) if redis else None
        if store is not None:
            started.append(store)
        extra = {"REDIS_URL": f"redis://127.0.0.1:{store.port}/0"} if store is not None else {}
        servers: list[Process] = []
        for number in range(1, replicas + 1):  # all at once: each takes a second or two to import and start
            server = spawn_server({**variables, **extra}, workdir / f"replica-{number}.log", name=f"replica {number}")
            servers.append(server)
            started.append(server)
        for server in servers:
            wait_ready(server)
        proxy = start_nginx(workdir / "nginx", [server.port for server in servers])
    except BaseException:
        for process in reversed(started):
            process.stop(grace=10)
        raise
    return Stack(workdir, store, servers, proxy)


@contextlib.contextmanager
def running_stack(
    workdir: Path, variables: Mapping[str, str], *, replicas: int = 2, redis: bool = True
) -> Iterator[Stack]:
    stack = start_stack(workdir, variables, replicas=replicas, redis=redis)
    try:
        yield stack
    finally:
        stack.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.replicas", description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--no-redis", action="store_true", help="no Redis: write locks per process")
    args = parser.parse_args(argv)
    variables = {name: value for name, value in os.environ.items() if name.startswith("OPENWEBUI_")}
    if "OPENWEBUI_URL" not in variables:
        parser.error("set OPENWEBUI_URL (and OPENWEBUI_API_KEY plus OPENWEBUI_MCP_AUTH=service if you want)")
    workdir = Path(tempfile.mkdtemp(prefix="owui-mcp-replicas-"))
    try:
        stack = start_stack(workdir, variables, replicas=args.replicas, redis=not args.no_redis)
    except (MissingBinary, RuntimeError) as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"MCP endpoint: {stack.url} (logs in {workdir}); Ctrl-C stops everything", flush=True)
    try:
        while all(process.alive() for process in [stack.nginx, *stack.replicas]):
            time.sleep(1)
        print("a process of the stack stopped; stopping the rest", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
