"""The test command: the unit suite once, then the live suite against every supported Open WebUI release.

    python -m devtools.check                 # everything (what .ci/run runs)
    python -m devtools.check --releases 0.12.4
    python -m devtools.check --unit-only

Releases missing from the cache are installed in the background, in parallel, while the unit suite runs. Prints,
per release, how many live tests ran and passed, and fails when any test failed or was skipped, or when a
release ran no test at all: a live tier that did not run is a failure, never a pass.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from devtools import openwebui_local

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Tally:
    name: str
    tests: int
    failures: int
    skipped: int
    seconds: float

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.skipped

    @property
    def ok(self) -> bool:
        return self.tests > 0 and self.failures == 0 and self.skipped == 0


def _tally(name: str, junit: Path, seconds: float) -> Tally:
    if not junit.exists():
        return Tally(name, 0, 0, 0, seconds)
    tests = failures = skipped = 0
    for suite in ET.parse(junit).getroot().iter("testsuite"):
        tests += int(suite.get("tests", 0))
        failures += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return Tally(name, tests, failures, skipped, seconds)


def _pytest(name: str, args: list[str], workdir: Path, env: dict[str, str] | None = None) -> Tally:
    junit = workdir / f"{name}.xml"
    print(f"\n=== {name}: pytest {' '.join(args)}", flush=True)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pytest", *args, f"--junitxml={junit}"],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return _tally(name, junit, time.monotonic() - started)


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

    installers = {
        version: subprocess.Popen(
            [sys.executable, "-m", "devtools.openwebui_local", "install", "--version", version], cwd=REPO
        )
        for version in releases
        if not openwebui_local.is_installed(version)
    }
    tallies: list[Tally] = []
    with tempfile.TemporaryDirectory(prefix="owui-check-") as tmp:
        workdir = Path(tmp)
        tallies.append(_pytest("unit", ["-m", "not live", *args.pytest_args], workdir))
        for version in releases:
            installer = installers.get(version)
            if installer is not None and installer.wait() != 0:
                print(f"installing Open WebUI {version} failed; the live suite will report it", flush=True)
            env = {"OPENWEBUI_LIVE_VERSION": version}
            tallies.append(_pytest(f"live-{version}", ["tests/live", *args.pytest_args], workdir, env))

    print("\nsuite            tests  passed  failed  skipped  seconds")
    for t in tallies:
        verdict = "ok" if t.ok else ("RAN NOTHING" if t.tests == 0 else "FAILED")
        counts = f"{t.tests:>5}  {t.passed:>6}  {t.failures:>6}  {t.skipped:>7}  {t.seconds:>7.0f}"
        print(f"{t.name:<16} {counts}  {verdict}")
    return 0 if all(t.ok for t in tallies) else 1


if __name__ == "__main__":
    sys.exit(main())
