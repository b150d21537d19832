"""The mocked Open WebUI of each release shape, served to the `sync` runs of a test."""

from __future__ import annotations

import pytest

from tests.support.sync import Base, served


@pytest.fixture(params=["0.12.4", "0.10.2", "0.9.6", "0.8.12"])
def base(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Base:
    return served(Base(request.param), monkeypatch)


@pytest.fixture
def legacy(monkeypatch: pytest.MonkeyPatch) -> Base:
    """0.6.5: attaches that rewrite the base's whole list."""
    return served(Base("0.6.5"), monkeypatch)


@pytest.fixture(params=["0.12.4", "0.10.2"])
def mirror(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Base:
    """0.12.4 and 0.10.2: the base mirrors the folder."""
    return served(Base(request.param), monkeypatch)
