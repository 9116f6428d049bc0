"""EnvPool: batched stepping in-process and in worker processes, crash/hang recovery."""

from __future__ import annotations

import pytest
from envs.corridor import CorridorEnvironment

from environments.base import Step
from environments.pool import EnvPool, EnvWorkerError
from gagpo_core.plugins import UnknownPluginError

SPECS = [("test", task, seed) for task, seed in [(0, 0), (1, 0), (2, 5), (3, 1), (4, 0), (5, 2)]]


def play_expert(pool: EnvPool, specs, sabotage: dict[tuple[int, int], str] | None = None):
    """Step every live slot with the expert until done; ``sabotage[(turn, slot)]`` overrides an action.

    Returns the resets and, per slot, the list of Steps it received.
    """
    sabotage = sabotage or {}
    resets = pool.reset(specs)
    trace: dict[int, list[Step]] = {slot: [] for slot in range(len(specs))}
    live = list(range(len(specs)))
    for turn in range(pool.environment_info.max_steps):
        if not live:
            break
        actions = pool.expert_actions(live)
        actions.update({slot: a for (t, slot), a in sabotage.items() if t == turn and slot in actions})
        steps = pool.step(actions)
        assert set(steps) == set(live)
        for slot, step in steps.items():
            trace[slot].append(step)
        live = [slot for slot in live if not steps[slot].done]
    return resets, trace


def test_expert_solves_every_task_in_process():
    env = CorridorEnvironment()
    pool = EnvPool.from_environment(env)
    for split in env.splits:
        specs = [(split, task, 7) for task in range(pool.num_tasks(split))]
        resets, trace = play_expert(pool, specs)
        assert {r.task_type for r in resets} == set(env.task_types)
        assert all(steps[-1].won and steps[-1].reward == 1.0 for steps in trace.values())
        assert all(len(steps) < env.max_steps for steps in trace.values())
    pool.close()


def test_only_given_slots_move_and_resets_are_deterministic():
    pool = EnvPool.from_environment(CorridorEnvironment())
    first = pool.reset(SPECS)
    before = pool.expert_actions([0, 1])
    step = pool.step({1: before[1]})
    assert list(step) == [1] and step[1].valid
    assert pool.expert_actions([0])[0] == before[0]  # slot 0 did not move
    assert pool.reset(SPECS) == first  # same (split, task, seed) -> same start
    with pytest.raises(ValueError, match="unknown slot"):
        pool.step({len(SPECS): "look"})
    pool.close()


def test_invalid_action_is_a_noop_with_same_state_key():
    pool = EnvPool.from_environment(CorridorEnvironment())
    reset = pool.reset([("train", 0, 0)])[0]
    step = pool.step({0: "dance wildly " * 1000})[0]
    assert not step.valid and not step.done and step.state_key == reset.state_key
    pool.close()


def test_workers_match_in_process_exactly(plugin):
    local = EnvPool.from_environment(CorridorEnvironment())
    with EnvPool("corridor", workers=2) as pool:
        assert pool.workers == 2 and pool.environment_info.name == "corridor"
        assert pool.num_tasks("train") == local.num_tasks("train")
        assert play_expert(pool, SPECS) == play_expert(local, SPECS)


def test_engine_exception_is_a_crashed_step_in_process():
    from envs.faulty import FaultyCorridorEnvironment

    pool = EnvPool.from_environment(FaultyCorridorEnvironment())
    _, trace = play_expert(pool, SPECS[:3], sabotage={(0, 1): "raise"})
    crashed = trace[1][-1]
    assert crashed.crashed and crashed.done and not crashed.valid and len(trace[1]) == 1
    assert "engine failure on purpose" in crashed.extra["error"]
    assert trace[0][-1].won and trace[2][-1].won
    assert pool.step({1: "look"})[1].crashed  # stays crashed until the next reset
    assert pool.expert_actions([1]) == {1: ""}
    pool.close()


def test_worker_death_is_reported_and_other_slots_are_unaffected(plugin):
    _, reference = play_expert(EnvPool.from_environment(CorridorEnvironment()), SPECS)
    with EnvPool("corridor-faulty", workers=2) as pool:
        # slot 3 lives on worker 1 with slots 1 and 5; it kills its process on turn 1
        _, trace = play_expert(pool, SPECS, sabotage={(1, 3): "crash"})
        crashed = trace[3][-1]
        assert crashed.crashed and crashed.done and "died" in crashed.extra["error"]
        assert trace[3][:-1] == reference[3][:1]
        for slot in (0, 1, 2, 4, 5):
            assert trace[slot] == reference[slot], slot
        # the restarted pool keeps working
        _, again = play_expert(pool, SPECS)
        assert again == reference


def test_hung_step_times_out_and_neighbours_are_rebuilt(plugin):
    _, reference = play_expert(EnvPool.from_environment(CorridorEnvironment()), SPECS)
    with EnvPool("corridor-faulty", workers=2, step_timeout_s=1.0) as pool:
        _, trace = play_expert(pool, SPECS, sabotage={(1, 2): "hang"})
        hung = trace[2][-1]
        assert hung.crashed and "timeout" in hung.extra["error"]
        for slot in (0, 1, 3, 4, 5):  # 0 and 4 share the hung worker
            assert trace[slot] == reference[slot], slot


def test_reset_that_kills_the_worker_raises_then_pool_recovers(plugin):
    with EnvPool("corridor-faulty", {"crash_task": 3}, workers=2) as pool:
        with pytest.raises(EnvWorkerError, match="reset failed twice"):
            pool.reset(SPECS)
        _, trace = play_expert(pool, [spec for spec in SPECS if spec[1] != 3])
        assert all(steps[-1].won for steps in trace.values())


@pytest.mark.parametrize("workers", [0, 1])
def test_bad_options_raise_the_environments_error(plugin, tmp_path, workers):
    with pytest.raises(ValueError, match="unknown corridor option"):
        EnvPool("corridor", {"colour": "red"}, workers=workers)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "corridor.json")):
        EnvPool("corridor", {"data_dir": str(tmp_path)}, workers=workers)
    with pytest.raises(UnknownPluginError, match="Did you mean 'corridor'"):
        EnvPool("coridor", workers=workers)
