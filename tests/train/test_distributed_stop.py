"""Ranks agree on stopping and resuming, in a real 2-process gloo run of the trainer (the featurised
policy in score mode on the corridor, so that episodes end at different turns on the two ranks):

- a Ctrl-C (SIGINT) that reaches ONE rank in the middle of a rollout stops both ranks cleanly, both
  keeping the same iteration, and ``--resume`` then continues exactly as an uninterrupted run;
- a rollout engine failing on ONE rank (mid-rollout, or while taking the new weights) stops both
  ranks at the same point, both saving the same iteration: that rank reports its error
  (``EngineCrashed``), the other stops cleanly (``TrainingInterrupted`` naming the cause);
- a resume where the ranks' newest checkpoints differ, or where one rank has nothing to resume, is
  refused with one line on every rank.

One spawn runs every phase (each phase in its own output folder) to pay the start-up once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from train_runs import comparable

TRAIN = ["model.name=bow-mlp", "rollout.action_mode=score", "env.name=corridor", "rollout.tasks_per_batch=3",
         "rollout.group_size=2", "env.max_steps=6", "train.iterations=3", "train.save_every=1",
         "train.eval_every=2", "train.eval_episodes=4", "optim.lr=1e-2"]
RUN = "default-gagpo-corridor-s0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ctrl_c_in_rollout(pool, iteration: int) -> None:
    """Ctrl-C reaching this process at the first environment step of the rollout of ``iteration``
    (the rollout is this rank's ``iteration``-th ``reset``: evaluations play on rank 0 only)."""
    reset, step = pool.reset, pool.step
    resets = [0]

    def counting_reset(specs):
        resets[0] += 1
        return reset(specs)

    def step_then_interrupt(actions):
        out = step(actions)
        if resets[0] == iteration:
            resets[0] = -1  # once
            os.kill(os.getpid(), signal.SIGINT)
        return out

    pool.reset, pool.step = counting_reset, step_then_interrupt


def _engine_fails_in(pool, iteration: int, where: str) -> None:
    """The score-mode engine of this process fails (``EngineError``, as a crashed GPU engine) at its first
    scoring call in the rollout of ``iteration`` (``where="rollout"``) or when it takes the weights of
    ``iteration``'s update (``where="sync"``). Only the rollout calls it on rank 1 (rank 0 evaluates)."""
    from gagpo_cli.train.acting.engines import EngineError
    from gagpo_cli.train.acting.score_rollout import ScoringEngine

    reset = pool.reset
    resets = [0]

    def counting_reset(specs):
        resets[0] += 1
        return reset(specs)

    def fail_at(method):
        def call(self, *args, **kwargs):
            if resets[0] == iteration:
                raise EngineError(f"the scoring engine of rank 1 failed in the {where} of iteration {iteration}")
            return method(self, *args, **kwargs)
        return call

    pool.reset = counting_reset
    name = "score_actions" if where == "rollout" else "sync"
    setattr(ScoringEngine, name, fail_at(getattr(ScoringEngine, name)))


def _phase(name: str, out_dir: Path, extra: list[str], *, resume: bool = False,
           interrupt_rank_1_at: int | None = None, engine_fails: str | None = None) -> dict:
    """One ``train`` call on this rank: what ended it (None: it finished) and the checkpoint it names."""
    from envs.corridor import CorridorEnvironment

    from environments.pool import EnvPool
    from gagpo_cli.config import load_config
    from gagpo_cli.errors import UsageError
    from gagpo_cli.train.acting.score_rollout import ScoringEngine
    from gagpo_cli.train.recipe import train
    from gagpo_cli.train.stopping import TrainingInterrupted

    cfg = load_config(None, [*TRAIN, *extra, f"logging.output_dir={out_dir / name}"])
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        if interrupt_rank_1_at is not None and dist.get_rank() == 1:
            _ctrl_c_in_rollout(pool, interrupt_rank_1_at)
        undo = {method: getattr(ScoringEngine, method) for method in ("score_actions", "sync")}
        if engine_fails is not None and dist.get_rank() == 1:
            _engine_fails_in(pool, 2, engine_fails)
        try:
            train(cfg, env_pool=pool, resume=resume)
        except TrainingInterrupted as exc:
            return {"ended": type(exc).__name__, "message": str(exc), "checkpoint": exc.checkpoint.name}
        except UsageError as exc:
            return {"ended": "UsageError", "message": str(exc)}
        finally:
            for method, original in undo.items():  # the engine works again in the next phase
                setattr(ScoringEngine, method, original)
    return {"ended": None}


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    out_dir = Path(out)
    results = {}
    try:
        results["straight"] = _phase("straight", out_dir, [])
        results["stopped"] = _phase("stopped", out_dir, [], interrupt_rank_1_at=2)
        results["resumed"] = _phase("stopped", out_dir, [], resume=True)
        # the ranks' newest checkpoints differ: rank 1 lost its newest one
        dist.barrier()
        if rank == 1:
            shutil.rmtree(out_dir / "straight" / RUN / "ranks" / "rank1" / "checkpoints" / "iter_000003")
        dist.barrier()
        results["differing"] = _phase("straight", out_dir, ["train.iterations=4"], resume=True)
        results["engine_rollout"] = _phase("engine_rollout", out_dir, [], engine_fails="rollout")
        results["engine_sync"] = _phase("engine_sync", out_dir, [], engine_fails="sync")
        dist.barrier()
        if rank == 1:  # rank 1's folder is gone: nothing to resume there
            shutil.rmtree(out_dir / "engine_sync" / RUN / "ranks" / "rank1")
        dist.barrier()
        results["missing"] = _phase("engine_sync", out_dir, [], resume=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    (out_dir / f"result{rank}.json").write_text(json.dumps(results))


def _metrics(run_dir: Path) -> list[dict]:
    from gagpo_cli.train.records import read_metrics

    return comparable(read_metrics(run_dir))


def test_ctrl_c_on_one_rank_stops_both_and_resume_continues_identically(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"result{r}.json").read_text()) for r in (0, 1)]
    assert [r["straight"]["ended"] for r in results] == [None, None]

    # SIGINT on rank 1 mid-rollout of iteration 2: both ranks stop, both keep iteration 1
    stopped = [r["stopped"] for r in results]
    assert [s["ended"] for s in stopped] == ["TrainingInterrupted", "TrainingInterrupted"], stopped
    assert [s["checkpoint"] for s in stopped] == ["iter_000001", "iter_000001"]
    # --resume on both ranks continues to the end, exactly as the uninterrupted run (both ranks' records)
    assert [r["resumed"]["ended"] for r in results] == [None, None]
    for rank_dir in (Path(RUN), Path(RUN) / "ranks" / "rank1"):
        straight = _metrics(tmp_path / "straight" / rank_dir)
        assert [m["iteration"] for m in straight] == [1, 2, 3]
        assert _metrics(tmp_path / "stopped" / rank_dir) == straight
    one_eval = json.loads((tmp_path / "straight" / RUN / "eval.json").read_text())
    resumed_eval = json.loads((tmp_path / "stopped" / RUN / "eval.json").read_text())
    for key in ("success_rate", "score", "per_episode"):
        assert resumed_eval[key] == one_eval[key]

    # a resume whose ranks would start from different iterations: refused, one line, on both ranks
    refused = [r["differing"] for r in results]
    assert [d["ended"] for d in refused] == ["UsageError", "UsageError"]
    assert refused[0]["message"] == refused[1]["message"] == (
        "the training processes disagree on the iteration to resume from (rank 0: 3, rank 1: 2)")

    # one rank cannot resume at all: it says why, the other names it
    missing = [r["missing"] for r in results]
    assert [m["ended"] for m in missing] == ["UsageError", "UsageError"]
    assert missing[1]["message"].startswith("--resume: ") and "holds no run to continue" in missing[1]["message"]
    assert missing[0]["message"] == f"training process 1: {missing[1]['message']}"

    # rank 1's engine fails mid-rollout of iteration 2: both keep iteration 1; in the weight sync after
    # iteration 2's update: both keep iteration 2 (the update is saved)
    for phase, kept in (("engine_rollout", "iter_000001"), ("engine_sync", "iter_000002")):
        ended = [r[phase] for r in results]
        assert [e["ended"] for e in ended] == ["TrainingInterrupted", "EngineCrashed"], ended
        assert [e["checkpoint"] for e in ended] == [kept, kept]
        assert ended[1]["message"].startswith(f"the scoring engine of rank 1 failed in the {phase[7:]}")
        assert ended[0]["message"].startswith("another training process's")
