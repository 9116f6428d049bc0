"""The training loop's collector settings are scoped: they apply inside ``loop_collector`` only."""

from __future__ import annotations

import gc

import pytest

from gagpo_cli.train.collector import OLDER, YOUNG, loop_collector


def test_loop_collector_freezes_raises_thresholds_and_restores_them():
    before = gc.get_threshold()
    alive = [[] for _ in range(10)]  # containers alive before the loop are frozen with it
    with loop_collector():
        assert gc.get_threshold() == (YOUNG, OLDER, OLDER)
        assert gc.get_freeze_count() >= len(alive)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_loop_collector_restores_after_an_error():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), loop_collector():
        raise RuntimeError("stopped")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_loop_collector_keeps_the_thresholds_for_an_accelerator_policy():
    before = gc.get_threshold()
    with loop_collector(on_cpu=False):
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
