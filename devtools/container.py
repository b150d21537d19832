"""The container image of the HTTP deployment, built and run here with Debian's podman and no image registry.

No registry is reachable from these machines, so nothing is pulled: the base is a Debian root file system made with
``mmdebstrap`` from Debian's packages (Python, its venv module, useradd, the CA bundle), kept as a tarball under
``CACHE_ROOT/container`` (named by a digest of what goes into it, so a warm run never makes it again), imported into
podman and given to the ``Containerfile`` as ``BASE_IMAGE``. The image build installs the server and its dependencies
from the package index (``--network host``; this machine's CA bundle is mounted over the base's for that step only,
so nothing of it stays in the image).

podman runs as root with ``runc`` and cgroupfs (crun refuses this machine's hybrid cgroup layout), a
``containers.conf`` setting ``default_ulimits = []``, and its storage where the caller says (the live test: its own
temporary folder, removed afterwards). Debian's packages: ``apt-get install podman mmdebstrap runc`` (``.ci/run``).

    python -m devtools.container base     # make the base tarball if missing; print its path
    python -m devtools.container build    # the base, then the image localhost/openwebui-rag-mcp:latest (podman's
                                          # default storage); prints how to run it
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools import binaries
from devtools.binaries import MissingBinary as MissingBinary  # re-exported: the live tests catch it here
from devtools.cachelock import exclusive_lock
from devtools.openwebui_local import CACHE_ROOT, REPO_ROOT

CONTAINER_CACHE = CACHE_ROOT / "container"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd")
# Left out of the base: documentation, manuals and translations (a third of its size, read by nobody in a container).
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
BASE_TAG = "localhost/openwebui-rag-mcp-base"
IMAGE = "localhost/openwebui-rag-mcp:latest"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
INSTALL_ADVICE = "install Debian's packages: apt-get install -y podman mmdebstrap runc (.ci/run does this)"
BASE_TIMEOUT = 1200.0
BUILD_TIMEOUT = 900.0
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def find_binary(name: str) -> str:
    """The path of podman, mmdebstrap or runc (`MissingBinary` with the advice to install them)."""
    return binaries.find_binary(name, INSTALL_ADVICE)


def _log(message: str) -> None:
    print(f"[container] {message}", file=sys.stderr, flush=True)


def base_digest() -> str:
    """What the base is made of: a different list of packages, suite, mirror or exclusions is a different base."""
    recipe = json.dumps([SUITE, MIRROR, BASE_PACKAGES, DPKG_EXCLUDES])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def base_tarball() -> Path:
    """The base root file system as a tarball, made with mmdebstrap the first time (about 2 minutes), then cached."""
    target = CONTAINER_CACHE / f"base-{SUITE}-{base_digest()}.tar"
    if target.exists():
        return target
    mmdebstrap = find_binary("mmdebstrap")
    waiting = f"another process is making the container base; waiting for it ({target})"
    with exclusive_lock(CACHE_ROOT / "locks" / "container-base.lock", lambda: _log(waiting)):
        if target.exists():
            return target
        log_path = CACHE_ROOT / "logs" / "container-base.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial.tar")
        excludes = [f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES]
        command = [
            mmdebstrap,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            *excludes,
            SUITE,
            str(partial),
            MIRROR,
        ]
        _log(f"making the container base with mmdebstrap (first time: a few minutes); log: {log_path}")
        started = time.monotonic()
        with log_path.open("w", encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            try:
                result = subprocess.run(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=BASE_TIMEOUT
                )
            except subprocess.TimeoutExpired as exc:
                partial.unlink(missing_ok=True)
                raise RuntimeError(f"mmdebstrap took more than {BASE_TIMEOUT:.0f} s; see {log_path}") from exc
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"mmdebstrap exited with {result.returncode}; see {log_path}")
        partial.rename(target)
        for old in CONTAINER_CACHE.glob(f"base-{SUITE}-*.tar"):  # bases of an older recipe
            if old != target:
                old.unlink(missing_ok=True)
        _log(f"made the container base in {time.monotonic() - started:.0f} s: {target}")
    return target


@dataclass(frozen=True)
class Podman:
    """podman with this machine's settings, and its storage under ``root`` (None: podman's default storage)."""

    conf: Path
    root: Path | None = None

    @classmethod
    def at(cls, workdir: Path, *, own_storage: bool = True) -> Podman:
        workdir.mkdir(parents=True, exist_ok=True)
        conf = workdir / "containers.conf"
        conf.write_text(CONTAINERS_CONF, encoding="utf-8")
        return cls(conf, workdir / "storage" if own_storage else None)

    def command(self, *args: str) -> list[str]:
        storage = [] if self.root is None else ["--root", str(self.root), "--runroot", str(self.root.with_name("run"))]
        return [find_binary("podman"), *storage, "--cgroup-manager", "cgroupfs", "--runtime", "runc", *args]

    def run(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``podman args``; a failure (with ``check``) raises RuntimeError with what podman said."""
        env = {**os.environ, "CONTAINERS_CONF": str(self.conf)}
        result = subprocess.run(
            self.command(*args),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"`podman {' '.join(args)}` exited with {result.returncode}:\n{result.stdout[-3000:]}\n"
                f"{result.stderr[-3000:]}"
            )
        return result

    def inspect(self, kind: str, name: str) -> dict[str, Any]:
        found = json.loads(self.run(kind, "inspect", name).stdout)
        if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
            raise RuntimeError(f"`podman {kind} inspect {name}` answered {found!r}")
        first: dict[str, Any] = found[0]
        return first

    def import_base(self) -> str:
        """The base tarball as an image (imported once per storage, tagged by its digest); returns its name."""
        name = f"{BASE_TAG}:{base_digest()}"
        if self.run("image", "exists", name, check=False).returncode != 0:
            self.run("import", str(base_tarball()), name, timeout=600)
        return name

    def build(self, tag: str = IMAGE) -> str:
        """The image from the repository's Containerfile on the local base; returns ``tag``."""
        base = self.import_base()
        find_binary("runc")
        self.run(
            "build",
            "--format",
            "docker",  # the OCI format has no HEALTHCHECK
            "--network",
            "host",
            "--volume",
            f"{CA_BUNDLE}:{CA_BUNDLE}:ro",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "--tag",
            tag,
            "--file",
            str(REPO_ROOT / "Containerfile"),
            str(REPO_ROOT),
            timeout=BUILD_TIMEOUT,
        )
        return tag

    def reset(self) -> None:
        """Remove every container and image of this storage (its own only: refuses podman's default storage)."""
        if self.root is None:
            raise RuntimeError("refusing to reset podman's default storage")
        # Not `podman system reset`, which also removes the machine's network definitions.
        self.run("rm", "--all", "--force", timeout=120, check=False)
        self.run("rmi", "--all", "--force", timeout=300, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.root.with_name("run"), ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.container", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["base", "build"])
    args = parser.parse_args(argv)
    try:
        if args.action == "base":
            print(base_tarball())
            return 0
        podman = Podman.at(CONTAINER_CACHE, own_storage=False)
        started = time.monotonic()
        tag = podman.build()
    except (MissingBinary, RuntimeError) as exc:
        print(f"devtools.container: {exc}", file=sys.stderr)
        return 1
    print(f"built {tag} in {time.monotonic() - started:.0f} s; run it with:")
    print(
        f"  CONTAINERS_CONF={podman.conf} podman --runtime runc --cgroup-manager cgroupfs run --rm --network host "
        f"-e OPENWEBUI_MCP_HOST=127.0.0.1 -e OPENWEBUI_URL=http://127.0.0.1:8080 {tag}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
