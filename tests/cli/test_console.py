"""Nested progress bars and the heartbeat (gagpo_cli.console)."""

from __future__ import annotations

import io
import time

from gagpo_cli import console
from gagpo_cli.console import Heartbeat, progress_bar


def test_heartbeat_prints_status_and_time_left_when_not_on_a_terminal():
    stream = io.StringIO()
    with Heartbeat("training", lambda: 90.0, period_s=0.05, stream=stream), progress_bar("iterations", 10) as it:
        it(3)
        with progress_bar("rollout: turns", 15) as turn:
            turn(4)
            time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert lines, "no heartbeat line"
    assert "training, iterations 3/10 > rollout: turns 4/15" in lines[-1]
    assert lines[-1].endswith("about 1m30s left")
    assert console.status() == ""  # closed bars leave the status


class FakeClock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_heartbeat_elapsed_and_time_left_follow_the_clock_it_is_given():
    clock, left = FakeClock(), [600.0]
    beat = Heartbeat("training", lambda: left[0], period_s=0, clock=clock)
    clock.now += 125
    left[0] = 475.0
    assert beat.line().endswith("training | 2m05s elapsed, about 7m55s left")
    beat.what = "training (loading the model)"  # a phase named while it runs
    assert "training (loading the model) | 2m05s elapsed" in beat.line()
