"""`giveup.time_left`: how long is left until an upload is given up, on the caller's clock."""

from __future__ import annotations

import math

from openwebui_rag_mcp.giveup import Waits, time_left

WAITS = Waits(answer=30.0, processing=300.0)


def test_time_left_counts_from_now_to_the_rule_s_deadline() -> None:
    assert time_left("processing", WAITS, since=1000.0, now=1000.0) == 300.0
    assert time_left("processing", WAITS, since=0.0, now=120.0) == 180.0  # 120 s of processing already waited
    assert time_left("answer", WAITS, since=50.0, now=60.0) == 20.0


def test_time_left_is_negative_once_past_and_infinite_without_evidence() -> None:
    assert time_left("processing", WAITS, since=0.0, now=400.0) == -100.0
    assert time_left("lost", WAITS, since=0.0, now=10.0) == math.inf
