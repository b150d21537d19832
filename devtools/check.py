"""The test command: the unit suite once, the wheel test, then the live suite against every supported Open WebUI
release.

    python -m devtools.check                 # everything (what .ci/run runs)
    python -m devtools.check --releases 0.12.4
    python -m devtools.check --unit-only     # the unit suite and the wheel test

The unit suite runs with no package index (`PIP_NO_INDEX=1`) and with `HTTP_PROXY`/`HTTPS_PROXY` pointing at a
closed port (and `NO_PROXY` unset), so a test that reaches the network without saying so fails. The wheel test
(marker `wheel`) needs pip and a package index, so it runs as its own step in the ordinary environment.

Releases missing from the cache are installed in the background, in parallel, while the unit suite runs. Prints,
per step, how many tests ran and passed, and fails when any test failed or was skipped, when a step ran no test at
all (a live tier that did not run is a failure, never a pass), or when a step or an install ran out of time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from devtools import openwebui_local

REPO = Path(__file__).resolve().parent.parent

# Generous: each is several times what the step takes on a slow machine. A step that runs out is stopped and fails.
UNIT_TIMEOUT = 20 * 60
WHEEL_TIMEOUT = 20 * 60
LIVE_TIMEOUT = 30 * 60  # per release
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


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A session of its own, so that a timeout stops the command and everything it started, and nothing else.
    return subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the command and what it started: SIGINT to its process group first (pytest then runs its teardown, which
    stops any Open WebUI it started), SIGKILL to whatever is left after `STOP_GRACE` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The command's exit code, or None if it ran out of `timeout` seconds (it is stopped then)."""
    try:
        return proc.wait(timeout=max(timeout, 0))
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None
    except BaseException:  # Ctrl-C: the command has its own session, so it did not get the signal
        _stop(proc)
        raise


def _environment(extra: dict[str, str], unset: tuple[str, ...] = ()) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in unset}
    return {**env, **extra}


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _pytest(name: str, args: list[str], workdir: Path, timeout: float, env: dict[str, str]) -> Tally:
    junit = workdir / f"{name}.xml"
    print(f"\n=== {name}: pytest {' '.join(args)}", flush=True)
    started = time.monotonic()
    proc = _start([sys.executable, "-m", "pytest", *args, f"--junitxml={junit}"], env)
    code = _wait(proc, timeout)
    seconds = time.monotonic() - started
    problem = ""
    if code is None:
        problem = f"TIMED OUT after {_duration(timeout)}"
        print(f"\n=== {name}: stopped, it ran longer than {_duration(timeout)}", flush=True)
    return _tally(name, junit, seconds, problem)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.check", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--releases",
        default=os.environ.get("OPENWEBUI_RELEASES", ",".join(openwebui_local.RELEASES)),
        help="comma-separated Open WebUI releases for the live suite (default: all supported)",
    )
    parser.add_argument("--unit-only", action="store_true", help="skip the live suite")
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
    tallies: list[Tally] = []
    try:
        with tempfile.TemporaryDirectory(prefix="owui-check-") as tmp:
            workdir = Path(tmp)
            offline = _environment(OFFLINE, OFFLINE_UNSET)
            unit_args = ["-m", "not live and not wheel", *args.pytest_args]
            tallies.append(_pytest("unit", unit_args, workdir, UNIT_TIMEOUT, offline))
            wheel_args = ["-m", "wheel", "tests/test_wheel.py", *args.pytest_args]
            tallies.append(_pytest("wheel", wheel_args, workdir, WHEEL_TIMEOUT, _environment({})))
            for version in releases:
                installer = installers.get(version)
                if installer is not None:
                    code = _wait(installer, INSTALL_TIMEOUT - (time.monotonic() - started))
                    if code is None:
                        limit = _duration(INSTALL_TIMEOUT)
                        print(f"installing Open WebUI {version} took longer than {limit}; stopped it", flush=True)
                        tallies.append(Tally(f"live-{version}", 0, 0, 0, 0.0, "INSTALL TIMED OUT"))
                        continue
                    if code != 0:
                        print(f"installing Open WebUI {version} failed; the live suite will report it", flush=True)
                env = _environment({"OPENWEBUI_LIVE_VERSION": version})
                # the slowest tests named in the log: where a tier's time goes, for whoever trims it next
                live_args = ["tests/live", "--durations=8", *args.pytest_args]
                tallies.append(_pytest(f"live-{version}", live_args, workdir, LIVE_TIMEOUT, env))
    finally:
        for installer in installers.values():
            if installer.poll() is None:
                _stop(installer)

    print("\nsuite            tests  passed  failed  skipped  seconds")
    for t in tallies:
        counts = f"{t.tests:>5}  {t.passed:>6}  {t.failures:>6}  {t.skipped:>7}  {t.seconds:>7.0f}"
        print(f"{t.name:<16} {counts}  {t.verdict}")
    return 0 if all(t.ok for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
