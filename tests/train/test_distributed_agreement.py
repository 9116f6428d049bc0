"""Ranks agree: the backend follows the policy's device even where CUDA is visible, any rank's stop is
every rank's, differing values (e.g. the iteration a resume starts from) are refused with one line, and
a rollout's turns go on while any rank still plays."""

from __future__ import annotations

import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gagpo_cli.errors import UsageError
from gagpo_cli.train import distributed


def test_backend_follows_the_policy_device():
    assert distributed.backend_for("cpu") == "gloo"
    # GPU tensors on NCCL, CPU tensors (FSDP2 shards offloaded to the CPU) on gloo
    assert distributed.backend_for(torch.device("cuda", 1)) == "cpu:gloo,cuda:nccl"
    assert distributed.backend_for("cuda") == "cpu:gloo,cuda:nccl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.cuda.is_available = lambda: True  # a GPU host: CUDA visible, the policy on the CPU
    ctx = distributed.init_from_env("cpu", timeout_minutes=1)
    result = {"backend": dist.get_backend(), "stop": distributed.agree_stop(rank == 1, ctx),
              "no_stop": distributed.agree_stop(False, ctx), "same": distributed.agree_same(7, "the iteration", ctx)}
    try:
        distributed.agree_same(10 * rank, "the resume iteration", ctx)
    except UsageError as exc:
        result["refused"] = str(exc)
    distributed.shutdown(ctx)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)


def test_two_ranks_agree_on_stopping_and_refuse_differing_values(tmp_path):
    out = str(tmp_path / "result")
    mp.spawn(_worker, args=(_free_port(), out), nprocs=2, join=True)
    for rank in (0, 1):
        with open(f"{out}.{rank}") as f:
            result = json.load(f)
        assert result["backend"] == "gloo"
        assert result["stop"] is True and result["no_stop"] is False  # rank 1's stop reached rank 0
        assert result["same"] == 7
        assert result["refused"] == "the training processes disagree on the resume iteration (rank 0: 0, rank 1: 10)"


def _rollout_worker(rank: int, port: int, out: str) -> None:
    """Rank 0 plays two corridor episodes for 3 turns, rank 1 none; rank 1 counts the batched calls of
    its (tiny, real) model and the prompts in them, with and without lock-step."""
    from envs.corridor import CorridorEnvironment
    from tiny_model import tiny_policy

    from environments.pool import EnvPool
    from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect

    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    ctx = distributed.init_from_env("cpu", timeout_minutes=1)
    policy = tiny_policy()
    calls: list[int] = []
    generate = policy.generate
    policy.generate = lambda prompts, **kw: (calls.append(len(prompts)), generate(prompts, **kw))[1]
    tasks = [TaskSpec("train", 3, 7, 0), TaskSpec("train", 3, 7, 0)] if rank == 0 else []
    result = {}
    with EnvPool.from_environment(CorridorEnvironment()) as pool:
        for lock_step in (False, True):
            calls.clear()
            settings = RolloutSettings(max_steps=3, history=2, temperature=1.0, max_new_tokens=4,
                                       success_reward=10.0, invalid_penalty=0.1, lock_step=lock_step)
            rollout = collect(policy, pool, tasks, settings, generator=torch.Generator().manual_seed(0), ctx=ctx)
            result[str(lock_step)] = {"calls": list(calls), "rows": len(rollout.rows)}
    distributed.shutdown(ctx)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)


def test_turns_go_on_while_any_rank_plays_and_an_idle_rank_keeps_lock_step(tmp_path):
    """A rank without live episodes keeps taking part in every turn's agreement (else the other rank
    would wait for it); under lock-step (model.parallel=fsdp) it also calls its model with no prompts
    once per turn, so that a sharded model's collectives meet."""
    out = str(tmp_path / "rollout")
    mp.spawn(_rollout_worker, args=(_free_port(), out), nprocs=2, join=True)
    results = []
    for rank in (0, 1):
        with open(f"{out}.{rank}") as f:
            results.append(json.load(f))
    turns = len(results[0]["False"]["calls"])
    assert 1 <= turns <= 3 and all(n > 0 for n in results[0]["False"]["calls"])
    assert results[0]["False"]["rows"] >= 2 and results[1]["False"] == {"calls": [], "rows": 0}
    assert results[1]["True"] == {"calls": [0] * len(results[0]["True"]["calls"]), "rows": 0}
