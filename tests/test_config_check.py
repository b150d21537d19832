"""The test command (devtools/check.py): which steps it runs in which environment, that a step out of time is
stopped and fails with a clear verdict, and that a step that ran nothing fails the run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from devtools import check, openwebui_local

SLOW_TEST = """
import signal
import time


def test_hangs_and_ignores_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # so that only the SIGKILL after the grace period ends it
    time.sleep(300)
"""


@pytest.fixture(autouse=True)
def own_durations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check.main` keeps the steps' times for the next run's order: here, not in the real cache."""
    monkeypatch.setattr(check, "_durations_file", lambda: tmp_path / "check-durations.json")


class Recorder:
    def __init__(self, tests: int = 3) -> None:
        self.steps: list[tuple[str, list[str], float, dict[str, str]]] = []
        self.tests = tests

    def __call__(
        self, name: str, args: list[str], workdir: Path, timeout: float, env: dict[str, str], *, quiet: bool = False
    ) -> check.Tally:
        self.steps.append((name, args, timeout, env))
        return check.Tally(name, self.tests, 0, 0, 0.1)


def test_unit_suite_runs_offline_and_the_wheel_test_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "*")
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    recorder = Recorder()
    monkeypatch.setattr(check, "_pytest", recorder)

    assert check.main(["--unit-only", "--jobs", "1", "--", "-x"]) == 0

    (unit, unit_args, unit_timeout, unit_env), (wheel, wheel_args, wheel_timeout, wheel_env) = recorder.steps
    assert (unit, wheel) == ("unit", "wheel")
    assert unit_args == ["-m", "not live and not wheel", "-x"]
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert unit_env[name] == "http://127.0.0.1:9", name
    assert "NO_PROXY" not in unit_env
    assert "no_proxy" not in unit_env
    assert unit_env["PIP_NO_INDEX"] == "1"
    assert wheel_args == ["-m", "wheel", "tests/test_wheel.py", "-x"]
    assert wheel_env["HTTPS_PROXY"] == "http://proxy.example:3128"  # the wheel step needs the real network set-up
    assert "PIP_NO_INDEX" not in wheel_env
    assert 0 < unit_timeout <= 3600
    assert 0 < wheel_timeout <= 3600


def test_live_releases_each_get_a_step_with_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(check, "_pytest", recorder)
    monkeypatch.setattr(openwebui_local, "is_installed", lambda version: True)

    assert check.main(["--releases", "0.6.5,0.12.4", "--jobs", "1"]) == 0

    live = [(name, args, timeout, env) for name, args, timeout, env in recorder.steps if name.startswith("live-")]
    assert [(name, args[0], env["OPENWEBUI_LIVE_VERSION"]) for name, args, _, env in live] == [
        ("live-0.12.4", "tests/live", "0.12.4"),
        ("live-0.6.5", "tests/live", "0.6.5"),
    ]
    assert all(0 < timeout <= 2 * 3600 for _, _, timeout, _ in live)


def test_a_step_that_ran_no_test_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check, "_pytest", Recorder(tests=0))
    assert check.main(["--unit-only"]) == 1
    assert "RAN NOTHING" in capsys.readouterr().out


def test_a_step_out_of_time_is_stopped_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "test_slow.py").write_text(SLOW_TEST, encoding="utf-8")
    started = time.monotonic()

    tally = check._pytest(
        "slow",
        ["-p", "no:cacheprovider", "-q", f"--rootdir={tmp_path}", str(tmp_path / "test_slow.py")],
        tmp_path,
        5,
        dict(os.environ),
        stop_grace=1,
    )

    assert time.monotonic() - started < 60
    assert not tally.ok
    assert tally.verdict == "TIMED OUT after 5 s"
    assert "slow: stopped, it ran longer than 5 s" in capsys.readouterr().out


def test_timed_out_verdict_wins_over_counts() -> None:
    tally = check.Tally("live-0.12.4", 40, 0, 0, 1800.0, "TIMED OUT after 30 min")
    assert not tally.ok
    assert tally.verdict == "TIMED OUT after 30 min"
    assert check.Tally("unit", 40, 0, 0, 1.0).verdict == "ok"
    assert check.Tally("unit", 40, 1, 0, 1.0).verdict == "FAILED"
    assert check.Tally("unit", 40, 0, 1, 1.0).verdict == "FAILED"


MEETS_THE_OTHER = """
import pathlib
import time


def test_{me}_runs_while_{other}_runs():
    here = pathlib.Path({folder!r})
    (here / "{me}.started").touch()
    print("{me} line one")
    deadline = time.monotonic() + 120
    while not (here / "{other}.started").exists():
        assert time.monotonic() < deadline, "{other} never ran at the same time"
        time.sleep(0.05)
    print("{me} line two")
"""


def _meeting_steps(tmp_path: Path) -> list[check.Step]:
    steps = []
    for me, other in (("alpha", "beta"), ("beta", "alpha")):
        path = tmp_path / f"test_{me}.py"
        path.write_text(MEETS_THE_OTHER.format(me=me, other=other, folder=str(tmp_path)), encoding="utf-8")
        args = ["-p", "no:cacheprovider", "-q", "-s", f"--rootdir={tmp_path}", str(path)]
        steps.append(check.Step(me, args, 300, dict(os.environ)))
    return steps


def test_two_jobs_run_steps_side_by_side_and_print_each_log_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()

    tallies = check._run_steps(_meeting_steps(tmp_path), workdir, jobs=2)

    assert [(t.name, t.tests, t.verdict) for t in tallies] == [("alpha", 1, "ok"), ("beta", 1, "ok")]
    out = capsys.readouterr().out
    for me, other in (("alpha", "beta"), ("beta", "alpha")):
        # the step's own lines together, under its heading, none of the other's among them
        section = out.split(f"=== {me}: its output")[1].split("\n=== ")[0]
        assert f"{me} line one" in section
        assert f"{me} line two" in section
        assert f"{other} line" not in section


def test_one_job_runs_steps_one_after_another(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    alpha, beta = _meeting_steps(tmp_path)
    waits_alone = check.Step(alpha.name, alpha.args, 5, alpha.env)  # alpha waits for beta, which has not started

    tallies = check._run_steps([waits_alone, beta], workdir, jobs=1)

    assert [t.name for t in tallies] == ["alpha", "beta"]
    assert tallies[0].verdict == "TIMED OUT after 5 s"
    assert tallies[1].verdict == "ok"  # alpha's marker was left behind, so beta met it


def test_a_step_whose_preparation_fails_fails_the_run(tmp_path: Path) -> None:
    def broken() -> str:
        raise RuntimeError("no such release")

    steps = [check.Step("live-9.9.9", ["tests/live"], 60, {}, broken), check.Step("ok", ["x"], 60, {}, lambda: "NOPE")]

    tallies = check._run_steps(steps, tmp_path, jobs=2)

    assert [(t.name, t.ok) for t in tallies] == [("live-9.9.9", False), ("ok", False)]
    assert tallies[0].verdict == "HARNESS ERROR: RuntimeError: no such release"
    assert tallies[1].verdict == "NOPE"


def test_with_two_jobs_the_longest_steps_start_first_by_their_last_times(tmp_path: Path) -> None:
    steps = [check.Step(name, [], 60, {}) for name in ("unit", "live-0.12.4", "live-0.6.5", "live-9.9.9", "wheel")]
    kept = {"unit": 280.0, "live-0.12.4": 1000.0, "live-0.6.5": 1100.0, "wheel": 15.0}

    ordered = check.longest_first(steps, kept)

    # a release never timed takes the guess for a live step (900 s): after the two known longer ones
    assert [step.name for step in ordered] == ["live-0.6.5", "live-0.12.4", "live-9.9.9", "unit", "wheel"]
    # with no time kept on this machine, the development machine's times give the order
    fresh = check.longest_first(steps, {})
    assert [step.name for step in fresh] == ["live-0.12.4", "live-0.6.5", "live-9.9.9", "unit", "wheel"]


def test_the_times_of_passing_steps_are_kept_for_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "check-durations.json"
    check._keep_durations(path, [check.Tally("unit", 10, 0, 0, 250.04), check.Tally("live-0.6.5", 10, 1, 0, 99.0)])
    check._keep_durations(path, [check.Tally("live-0.6.5", 10, 0, 0, 1200.0)])

    assert check._kept_durations(path) == {"unit": 250.0, "live-0.6.5": 1200.0}  # a failed run's time is not kept
    path.write_text("not json", encoding="utf-8")
    assert check._kept_durations(path) == {}


def test_once_stopping_the_running_commands_end_and_no_other_starts() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    running = check._start(sleeper, dict(os.environ))
    try:
        check._stop_all()
        assert running.poll() is not None
        with pytest.raises(RuntimeError, match="being stopped"):
            check._start(sleeper, dict(os.environ))
        # a lane asks for its next step: there is none to take once the run is being stopped
        tallies = check._run_steps([], Path("."), jobs=2)
        assert tallies == []
    finally:
        check._STOPPING.clear()
        if running.poll() is None:
            running.kill()
            running.wait()


def test_pytest_failing_on_its_own_fails_the_step(tmp_path: Path) -> None:
    step = check.Step("usage", ["-p", "no:cacheprovider", "--no-such-option"], 120, dict(os.environ))

    (tally,) = check._run_steps([step], tmp_path, jobs=1)

    assert tally.verdict == "PYTEST EXITED WITH 4"
