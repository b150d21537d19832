"""`bench.sync`'s rounds and report, with the ways' measurements faked (the benchmark itself needs a real Open WebUI
and oikb; it measures and gates nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import sync as bench_sync
from bench.sync import Held, Measured
from devtools import openwebui_local as owui
from devtools.openwebui_local import Instance


def fake_ways(monkeypatch: pytest.MonkeyPatch, ours: Any, oikb: Any, floor: Any) -> None:
    """The three ways measured by fakes, and nothing installed or compiled."""
    monkeypatch.setattr(bench_sync, "measure_ours", ours)
    monkeypatch.setattr(bench_sync, "measure_oikb", oikb)
    monkeypatch.setattr(bench_sync, "measure_floor", floor)
    monkeypatch.setattr(owui, "install", lambda version: None)
    monkeypatch.setattr(bench_sync, "compiled", lambda: None)


def test_rounds_rotate_the_order_and_ratios_are_taken_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    # Round by round: ours 20, 30, 40 s; oikb one at a time 10, 20, 20 s; oikb four at a time 16, never, 40 s.
    ours = iter([20.0, 30.0, 40.0])
    oikb = {1: iter([10.0, 20.0, 20.0]), 4: iter([16.0, None, 40.0])}

    def measure_ours(
        version: str, root: Path, folder: Path, files: int, concurrency: int, held: Held | None = None
    ) -> Measured:
        order.append("ours")
        seconds = next(ours)
        return Measured(seconds, seconds, 0.4, 70)

    def measure_oikb(
        version: str, root: Path, folder: Path, files: int, workers: int, held: Held | None = None
    ) -> Measured:
        order.append(f"oikb-{workers}")
        searchable = next(oikb[workers])
        note = "" if searchable else "the base held 190 of 200 files when nothing more came"
        return Measured(searchable or 15.0, searchable, 0.2, 72, note)

    def measure_floor(version: str, root: Path, folder: Path, concurrency: int, held: Held | None = None) -> Measured:
        order.append("floor")
        return Measured(25.0, 25.0, None, None)

    fake_ways(monkeypatch, measure_ours, measure_oikb, measure_floor)

    report = bench_sync.run("0.12.4", 3, 4, rounds=3)

    assert order == [
        *("ours", "oikb-1", "oikb-4", "floor"),
        *("oikb-1", "oikb-4", "floor", "ours"),
        *("oikb-4", "floor", "ours", "oikb-1"),
    ]
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in report.splitlines() if line.startswith("| ")}
    ours_row = rows["openwebui-rag-mcp sync --concurrency 4"]
    assert "| 30.0 (20.0 to 40.0) | 30.0 (20.0 to 40.0) | 0.40 (0.40 to 0.40) |" in ours_row
    never = rows["oikb sync --concurrency 4 (the base held 190 of 200 files when nothing more came)"]
    assert "| 28.0 (16.0 to 40.0), 1 never |" in never
    # ours over oikb's best: 20/10, 30/20, 40/20 -> 2.0, 1.5, 2.0; over the floor: 0.8, 1.2, 1.6
    assert "ours over oikb's best per round: 2.00x (1.50x to 2.00x)" in report
    assert "ours over the floor per round: 1.20x (0.80x to 1.60x)" in report
    assert "nothing changed, ours over oikb's best per round: 2.00x (2.00x to 2.00x)" in report


def test_with_held_files_every_way_starts_on_a_copy_of_one_preloaded_open_webui(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    preloaded: list[tuple[str, int]] = []
    given: list[Held | None] = []
    stopped: list[Instance] = []
    instance = Instance("0.9.6", "http://127.0.0.1:1", "sk-x", "", "", "", Path("data"), Path("log"), "", 0, 0)

    def preload(version: str, root: Path, files: int) -> Held:
        preloaded.append((version, files))
        return Held(instance, files)

    def measured(held: Held | None) -> Measured:
        given.append(held)
        return Measured(10.0, 10.0, 0.3, 70)

    def measure_ours(
        version: str, root: Path, folder: Path, files: int, concurrency: int, held: Held | None
    ) -> Measured:
        return measured(held)

    def measure_oikb(version: str, root: Path, folder: Path, files: int, workers: int, held: Held | None) -> Measured:
        return measured(held)

    def measure_floor(version: str, root: Path, folder: Path, concurrency: int, held: Held | None) -> Measured:
        return measured(held)

    fake_ways(monkeypatch, measure_ours, measure_oikb, measure_floor)
    monkeypatch.setattr(bench_sync, "preload", preload)
    monkeypatch.setattr(owui, "stop", stopped.append)

    report = bench_sync.run("0.9.6", 3, 4, rounds=2, held_files=1500)

    assert preloaded == [("0.9.6", 1500)]  # once for every round and way
    assert [held.instance if held else None for held in given] == [instance] * 8
    assert stopped == [instance]  # its embedding server, once the rounds are over
    assert "each on a copy of an Open WebUI already holding 1500 other notes" in report


def test_only_the_chosen_ways_are_measured_and_sync_always(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []

    def measure_ours(
        version: str, root: Path, folder: Path, files: int, concurrency: int, held: Held | None
    ) -> Measured:
        order.append("ours")
        return Measured(30.0, 30.0, 0.3, 70)

    def measure_oikb(version: str, root: Path, folder: Path, files: int, workers: int, held: Held | None) -> Measured:
        order.append(f"oikb-{workers}")
        return Measured(20.0, 25.0, 0.2, 72)

    def measure_floor(version: str, root: Path, folder: Path, concurrency: int, held: Held | None) -> Measured:
        order.append("floor")
        return Measured(25.0, 25.0, None, None)

    fake_ways(monkeypatch, measure_ours, measure_oikb, measure_floor)

    report = bench_sync.run("0.9.6", 3, 4, rounds=2, ways=["oikb"])

    assert order == ["ours", "oikb-1", "oikb-1", "ours"]
    assert "over the floor" not in report
    assert "ours over oikb's best per round: 1.20x (1.20x to 1.20x)" in report
