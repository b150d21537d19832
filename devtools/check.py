"""The test command: the unit suite once, the wheel test, and the live suite against every supported Open WebUI
release.

    python -m devtools.check                 # everything (what .ci/run runs)
    python -m devtools.check --releases 0.12.4
    python -m devtools.check --unit-only     # the unit suite and the wheel test
    python -m devtools.check --jobs 1        # one step at a time, its output as it comes

The unit suite runs with no package index (`PIP_NO_INDEX=1`) and with `HTTP_PROXY`/`HTTPS_PROXY` pointing at a
closed port (and `NO_PROXY` unset), so a test that reaches the network without saying so fails. The wheel test
(marker `wheel`) needs pip and a package index, so it runs as its own step in the ordinary environment.

Steps run `--jobs` at a time (default 2): a live release keeps about one core busy (its Open WebUI and the test
process take turns), so two side by side use a 2-core machine where one left a core idle. Each release has its own
Open WebUI, ports, data and pytest temporary directory; with more than one job a step's output goes to its own log,
printed whole when the step ends, and the longest steps start first, by the times of their last passing run (kept in
`check-durations.json` beside the cached releases), so that the short ones fill in behind them. Releases missing
from the cache are installed in the background, in parallel, from the start. Prints, per step, how many tests ran and
passed, and fails when any test failed or was skipped, when a step ran no test at all (a live tier that did not run
is a failure, never a pass), or when a step or an install ran out of time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from devtools import openwebui_local

REPO = Path(__file__).resolve().parent.parent

# Generous: each is several times what the step takes on a slow machine. A step that runs out is stopped and fails.
UNIT_TIMEOUT = 20 * 60
WHEEL_TIMEOUT = 20 * 60
LIVE_TIMEOUT = 40 * 60  # per release (two releases side by side each take longer than one alone)
INSTALL_TIMEOUT = 60 * 60  # per release, from the start of the run; installs run in parallel
STOP_GRACE = 60  # seconds between asking a timed-out step to stop (SIGINT, so fixtures tear down) and killing it

# Any network use the unit suite does not declare goes to this closed port and fails.
DEAD_PROXY = "http://127.0.0.1:9"
OFFLINE = {
    "HTTP_PROXY": DEAD_PROXY,
    "HTTPS_PROXY": DEAD_PROXY,
    "http_proxy": DEAD_PROXY,
    "https_proxy": DEAD_PROXY,
    "PIP_NO_INDEX": "1",
}
OFFLINE_UNSET = ("NO_PROXY", "no_proxy")


@dataclass(frozen=True)
class Tally:
    name: str
    tests: int
    failures: int
    skipped: int
    seconds: float
    problem: str = ""  # why the step failed outside its tests (it ran out of time, its install did)

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.skipped

    @property
    def ok(self) -> bool:
        return self.tests > 0 and self.failures == 0 and self.skipped == 0 and not self.problem

    @property
    def verdict(self) -> str:
        if self.problem:
            return self.problem
        if self.ok:
            return "ok"
        return "RAN NOTHING" if self.tests == 0 else "FAILED"


def _tally(name: str, junit: Path, seconds: float, problem: str = "") -> Tally:
    if not junit.exists():
        return Tally(name, 0, 0, 0, seconds, problem)
    tests = failures = skipped = 0
    try:
        root = ET.parse(junit).getroot()
    except ET.ParseError:  # cut short by a timeout
        return Tally(name, 0, 0, 0, seconds, problem or "UNREADABLE REPORT")
    for suite in root.iter("testsuite"):
        tests += int(suite.get("tests", 0))
        failures += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return Tally(name, tests, failures, skipped, seconds, problem)


def _start(cmd: list[str], env: dict[str, str], output: TextIO | None = None) -> subprocess.Popen[bytes]:
    with _RUNNING_LOCK:
        if _STOPPING.is_set():  # Ctrl-C: nothing new starts, whichever lane asks
            raise RuntimeError("the run is being stopped")
        # A session of its own, so that a timeout stops the command and everything it started, and nothing else.
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, stdout=output, stderr=output)
        _RUNNING.add(proc)
    return proc


# Every command started and not yet waited for: a Ctrl-C in the main thread stops them all, whichever thread waits.
_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()
_PRINT_LOCK = threading.Lock()  # a finished step's log is printed whole, never interleaved with another's


def _say(text: str) -> None:
    with _PRINT_LOCK:
        print(text, flush=True)


def _stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """Stop the command and what it started: SIGINT to its process group first (pytest then runs its teardown, which
    stops any Open WebUI it started), SIGKILL to whatever is left after `grace` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _stop_all() -> None:
    """Stop every command started (SIGINT to all at once, SIGKILL after `STOP_GRACE`), and start no other."""
    with _RUNNING_LOCK:
        _STOPPING.set()
        running = list(_RUNNING)
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE
    for proc in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def _wait(proc: subprocess.Popen[bytes], timeout: float, grace: float = STOP_GRACE) -> int | None:
    """The command's exit code, or None if it ran out of `timeout` seconds (it is stopped then, within `grace`)."""
    try:
        return proc.wait(timeout=max(timeout, 0))
    except subprocess.TimeoutExpired:
        _stop(proc, grace)
        return None
    except BaseException:  # Ctrl-C: the command has its own session, so it did not get the signal
        _stop(proc)
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)


def _environment(extra: dict[str, str], unset: tuple[str, ...] = ()) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in unset}
    return {**env, **extra}


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _pytest(
    name: str,
    args: list[str],
    workdir: Path,
    timeout: float,
    env: dict[str, str],
    *,
    quiet: bool = False,
    stop_grace: float = STOP_GRACE,
) -> Tally:
    """Run one pytest step. `quiet`: its output goes to a log in `workdir`, printed whole when the step ends (so
    that steps running side by side do not interleave their lines). `stop_grace`: see `_stop`."""
    junit = workdir / f"{name}.xml"
    # each step its own temporary directory: pytest's shared numbered ones are not meant for sessions side by side
    command = [sys.executable, "-m", "pytest", *args, f"--junitxml={junit}", f"--basetemp={workdir / name}"]
    _say(f"\n=== {name}: pytest {' '.join(args)}" + (" (its output follows when it ends)" if quiet else ""))
    started = time.monotonic()
    log_path = workdir / f"{name}.log"
    with open(log_path, "w", encoding="utf-8") if quiet else contextlib.nullcontext() as log:
        code = _wait(_start(command, env, log), timeout, stop_grace)
    seconds = time.monotonic() - started
    problem = ""
    if code is None:
        problem = f"TIMED OUT after {_duration(timeout)}"
    elif code not in (0, 1):  # 1: tests failed, which the report counts; any other code is pytest's own failure
        problem = f"PYTEST EXITED WITH {code}"
    with _PRINT_LOCK:
        if quiet:
            print(f"\n=== {name}: its output ({_duration(seconds)})", flush=True)
            print(log_path.read_text(encoding="utf-8", errors="replace"), end="", flush=True)
        if problem:
            print(f"\n=== {name}: stopped, it ran longer than {_duration(timeout)}", flush=True)
    return _tally(name, junit, seconds, problem)


@dataclass(frozen=True)
class Step:
    name: str
    args: list[str]
    timeout: float
    env: dict[str, str]
    prepare: Callable[[], str] = lambda: ""  # waits for what the step needs; a problem that stops it, or ""


# For the order only, where this machine kept no time of its own for a step: each step's time in a full run, two at a
# time, on the 2-core development machine (2026-12-03); a step not listed here by a guess for its kind.
MEASURED_SECONDS = {
    "live-0.10.2": 1202.0,
    "live-0.12.4": 1057.0,
    "live-0.6.5": 1016.0,
    "live-0.6.43": 677.0,
    "live-0.8.12": 614.0,
    "unit": 289.0,
    "wheel": 17.0,
}
GUESSED_SECONDS = {"unit": 300.0, "wheel": 30.0, "live": 900.0}


def _durations_file() -> Path:
    return openwebui_local.CACHE_ROOT / "check-durations.json"


def _kept_durations(path: Path) -> dict[str, float]:
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(kept, dict):
        return {}
    return {name: float(value) for name, value in kept.items() if isinstance(value, int | float)}


def _keep_durations(path: Path, tallies: list[Tally]) -> None:
    """Keep the times of the steps that passed (a failed or cut-short step's time says little of the next run's)."""
    kept = _kept_durations(path) | {t.name: round(t.seconds, 1) for t in tallies if t.ok}
    with contextlib.suppress(OSError):  # only the order of a later run depends on it
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def longest_first(steps: list[Step], kept: dict[str, float]) -> list[Step]:
    """The steps by the time each took last (longest first; a step this machine never timed by MEASURED_SECONDS, or
    a guess for its kind)."""

    def expected(step: Step) -> float:
        guess = MEASURED_SECONDS.get(step.name, GUESSED_SECONDS.get(step.name.split("-", 1)[0], 0.0))
        return kept.get(step.name, guess)

    return sorted(steps, key=expected, reverse=True)


def _run_steps(steps: list[Step], workdir: Path, jobs: int) -> list[Tally]:
    """Run the steps, `jobs` at a time, in their order; the tallies come back in the same order."""
    tallies: dict[int, Tally] = {}
    todo = list(enumerate(steps))
    todo_lock = threading.Lock()
    _STOPPING.clear()

    def lane() -> None:
        while True:
            with todo_lock:
                if not todo or _STOPPING.is_set():
                    return
                index, step = todo.pop(0)
            try:
                problem = step.prepare()
                if problem:
                    tallies[index] = Tally(step.name, 0, 0, 0, 0.0, problem)
                    continue
                tallies[index] = _pytest(step.name, step.args, workdir, step.timeout, step.env, quiet=jobs > 1)
            except Exception as exc:  # the harness's own failure fails the step, never the table's other rows
                tallies[index] = Tally(step.name, 0, 0, 0, 0.0, f"HARNESS ERROR: {type(exc).__name__}: {exc}")

    if jobs <= 1:
        lane()
    else:
        lanes = [threading.Thread(target=lane, name=f"lane-{n}", daemon=True) for n in range(jobs)]
        for thread in lanes:
            thread.start()
        try:
            for thread in lanes:
                thread.join()
        except BaseException:  # Ctrl-C: the steps have sessions of their own and did not get it
            _stop_all()
            for thread in lanes:  # each lane ends once its step has: its report is read before the folder goes
                thread.join(timeout=STOP_GRACE + 30)
            raise
    # a step without a tally (its lane died) is a failure, never a row left out of the table
    return [tallies.get(index, Tally(step.name, 0, 0, 0, 0.0, "DID NOT RUN")) for index, step in enumerate(steps)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.check", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--releases",
        default=os.environ.get("OPENWEBUI_RELEASES", ",".join(openwebui_local.RELEASES)),
        help="comma-separated Open WebUI releases for the live suite (default: all supported)",
    )
    parser.add_argument("--unit-only", action="store_true", help="skip the live suite")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.environ.get("OPENWEBUI_CHECK_JOBS", "2"),  # argparse converts (and checks) a string default
        help="steps side by side (default 2; 1 runs them one after another with their output as it comes)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for pytest (e.g. -x)")
    args = parser.parse_args(argv)
    releases = [] if args.unit_only else [r.strip() for r in args.releases.split(",") if r.strip()]

    started = time.monotonic()
    installers = {
        version: _start(
            [sys.executable, "-m", "devtools.openwebui_local", "install", "--version", version], _environment({})
        )
        for version in releases
        if not openwebui_local.is_installed(version)
    }

    def installed(version: str) -> Callable[[], str]:
        def wait() -> str:
            installer = installers.get(version)
            if installer is None:
                return ""
            code = _wait(installer, INSTALL_TIMEOUT - (time.monotonic() - started))
            if code is None:
                _say(f"installing Open WebUI {version} took longer than {_duration(INSTALL_TIMEOUT)}; stopped it")
                return "INSTALL TIMED OUT"
            if code != 0:
                _say(f"installing Open WebUI {version} failed; the live suite will report it")
            return ""

        return wait

    offline = _environment(OFFLINE, OFFLINE_UNSET)
    steps = [Step("unit", ["-m", "not live and not wheel", *args.pytest_args], UNIT_TIMEOUT, offline)]
    # the newest first: with two lanes the long releases start early and the short ones fill in behind them
    for version in sorted(releases, key=openwebui_local.version_parts, reverse=True):
        env = _environment({"OPENWEBUI_LIVE_VERSION": version})
        # the slowest tests named in the log: where a tier's time goes, for whoever trims it next
        live_args = ["tests/live", "--durations=8", *args.pytest_args]
        steps.append(Step(f"live-{version}", live_args, LIVE_TIMEOUT, env, installed(version)))
    # the wheel test needs pip and a package index: the ordinary environment
    wheel_args = ["-m", "wheel", "tests/test_wheel.py", *args.pytest_args]
    steps.append(Step("wheel", wheel_args, WHEEL_TIMEOUT, _environment({})))
    durations = _durations_file()
    if args.jobs > 1:
        steps = longest_first(steps, _kept_durations(durations))
        if installers:  # the live steps would wait for their installs: the unit suite goes first, beside them
            steps.sort(key=lambda step: step.name != "unit")
    tallies: list[Tally] = []
    try:
        with tempfile.TemporaryDirectory(prefix="owui-check-") as tmp:
            tallies = _run_steps(steps, Path(tmp), max(args.jobs, 1))
        if not args.pytest_args:  # a run narrowed (-k, -x) says little of a full one's times
            _keep_durations(durations, tallies)
    finally:
        for installer in installers.values():
            if installer.poll() is None:
                _stop(installer)

    print(
        f"\nsuite            tests  passed  failed  skipped  seconds   (in all {_duration(time.monotonic() - started)})"
    )
    for t in tallies:
        counts = f"{t.tests:>5}  {t.passed:>6}  {t.failures:>6}  {t.skipped:>7}  {t.seconds:>7.0f}"
        print(f"{t.name:<16} {counts}  {t.verdict}")
    return 0 if all(t.ok for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
