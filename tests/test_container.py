"""The Containerfile and its helper, read without building anything (the live tier builds and runs the image:
tests/live/test_live_container.py): a non-root user, a health check on /healthz, no credential baked in, the compose
example of docs/deployment.md building this file, and devtools.container's settings for this machine's podman."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devtools import container
from devtools.container import Podman
from openwebui_rag_mcp.config import VARIABLES

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = (ROOT / "Containerfile").read_text(encoding="utf-8")
SECRETS = ("OPENWEBUI_API_KEY", "OPENWEBUI_MCP_TOKENS", "REDIS_URL")


def instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) of a Containerfile, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_image_runs_as_an_unprivileged_user() -> None:
    users = [rest for word, rest in instructions(CONTAINERFILE) if word == "USER"]
    assert users == ["10001:10001"]
    assert instructions(CONTAINERFILE)[-1][0] == "ENTRYPOINT"  # nothing after USER runs as root


def test_the_health_check_asks_healthz() -> None:
    checks = [rest for word, rest in instructions(CONTAINERFILE) if word == "HEALTHCHECK"]
    assert len(checks) == 1
    assert "/healthz" in checks[0]
    assert "/readyz" not in checks[0]  # liveness must not depend on Open WebUI


def test_no_credential_is_baked_in() -> None:
    settings = " ".join(rest for word, rest in instructions(CONTAINERFILE) if word in ("ENV", "ARG", "LABEL"))
    for name in SECRETS:
        assert name not in settings
    assert not re.search(r"sk-[A-Za-z0-9]", CONTAINERFILE)
    declared = {variable.name for variable in VARIABLES}
    set_in_image = set(re.findall(r"\b(OPENWEBUI_[A-Z_]+)=", settings))
    assert set_in_image <= declared, set_in_image - declared  # only real configuration variables
    assert set_in_image == {"OPENWEBUI_MCP_TRANSPORT", "OPENWEBUI_MCP_HOST", "OPENWEBUI_MCP_PORT"}


def test_the_compose_example_builds_the_containerfile() -> None:
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    block = text[text.index("  openwebui-rag-mcp:\n    build:") :]
    block = block[: block.index("```")]
    assert "dockerfile: Containerfile" in block
    for name in SECRETS[:2]:
        assert name not in block


def test_the_base_recipe_names_its_tarball() -> None:
    digest = container.base_digest()
    assert re.fullmatch(r"[0-9a-f]{12}", digest)
    assert set(container.BASE_PACKAGES) >= {"python3", "python3-venv", "ca-certificates", "passwd"}


def test_podman_gets_this_machines_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "find_binary", lambda name: f"/usr/bin/{name}")
    podman = Podman.at(tmp_path)
    conf = podman.conf.read_text(encoding="utf-8")
    assert "default_ulimits = []" in conf
    assert 'runtime = "runc"' in conf
    command = podman.command("images")
    assert command[:5] == ["/usr/bin/podman", "--root", str(tmp_path / "storage"), "--runroot", str(tmp_path / "run")]
    assert command[-5:] == ["--cgroup-manager", "cgroupfs", "--runtime", "runc", "images"]


def test_resetting_podmans_default_storage_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="default storage"):
        Podman.at(tmp_path, own_storage=False).reset()
