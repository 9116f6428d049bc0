"""Data-parallel training: two gloo processes, each updating on its share of the step rows, make
exactly the parameter update (and report the metrics) of one process on the whole batch, with one
mini-batch or several (rows dealt into mini-batches by their index in the whole batch)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support import perturbed_bow_mlp, random_generate_batch
from tiny_model import tiny_policy

from estimators import get_estimator
from gagpo_cli.config import OptimConfig
from gagpo_cli.errors import UsageError
from gagpo_cli.train.acting.rollout import TaskSpec
from gagpo_cli.train.distributed import Dist, gather, shard, shard_tasks
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.learning.score_update import ScoreSample, ScoreUpdater
from gagpo_cli.train.policies.scoring import ScoreInput

GROUPS, K = 4, 3
OPTIM = OptimConfig(lr=1e-2, kl_coef=0.05, entropy_coef=0.01, epochs=2, token_budget=60, critic_lr=1e-2)


def _batch() -> list[GenerateSample]:
    """GROUPS x K generate-mode rows (tests/support.py) with value targets."""
    return random_generate_batch(GROUPS * K, value_targets=True)


MINI_BATCHES = 4  # "-m4" cases: 6 rows per rank, dealt by rank they would form other mini-batches


def _rows_of(ctx: Dist, split: str) -> list[int]:
    split = split.removeprefix("score-").removesuffix("-m4")
    if split == "all-on-rank-0":  # the other rank has nothing to train on and still takes part
        return list(range(GROUPS * K)) if ctx.rank == 0 else []
    return [g * K + j for g in shard(GROUPS, ctx) for j in range(K)]  # whole rollout groups per rank


def _score_batch() -> list[ScoreSample]:
    """GROUPS x K score-mode rows (2-5 candidates each, one step without any) with advantages."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(GROUPS * K):
        k = 2 + i % 4
        cands = tuple(f"go to shelf {j}" if j % 2 else f"take bowl {j} from table {i}" for j in range(k))
        inp = None if i == 4 else ScoreInput("alfworld", "put some bowl on shelf", f"You see table {i}.",
                                             [("start", "look")], 1, cands, past_actions=("look",) * (i % 3))
        rows.append(ScoreSample(inp, int(torch.randint(k, (1,), generator=g)),
                                advantage=float(torch.randn(1, generator=g)),
                                value_target=float(torch.randn(1, generator=g)), rollout_logp=-1.0 - 0.1 * i))
    return rows


# Score mode compares gradients at lr 0: the featurised policy has many gradients below 1e-7 (a bias
# shared by all candidates has an exact gradient of 0), whose sign Adam turns into lr-sized steps, so
# summation-order rounding would show in the weights. No clipping, so the gradient the optimizer
# receives is the summed one itself.
SCORE_OPTIM = dataclasses.replace(OPTIM, lr=0.0, critic_lr=0.0, grad_clip=1e9)


def _updater(estimator: str, split: str, ctx: Dist | None = None) -> tuple[GenerateUpdater | ScoreUpdater, list]:
    """The updater of a case and its batch: ``score-*`` splits train the featurised policy in score mode."""
    torch.manual_seed(0)
    mini = MINI_BATCHES if split.endswith("-m4") else 1
    if split.startswith("score"):
        optim = dataclasses.replace(SCORE_OPTIM, mini_batches=mini)
        return ScoreUpdater(perturbed_bow_mlp(), get_estimator(estimator), optim, dist=ctx), _score_batch()
    return (GenerateUpdater(tiny_policy(), get_estimator(estimator), dataclasses.replace(OPTIM, mini_batches=mini),
                            dist=ctx), _batch())


def _update(ctx: Dist, estimator: str, split: str) -> tuple[dict[str, float], list[torch.Tensor], list]:
    """One update of a case: its metrics, the weights after it, and the gradients of every optimizer
    step (summed over ranks and clipped: captured as the policy's optimizer steps, before the critic's)."""
    updater, samples = _updater(estimator, split, ctx)
    params = list(updater.params) + (list(updater.critic.head.parameters()) if updater.critic is not None else [])
    grads: list[list[torch.Tensor]] = []
    step = updater.optimizer.step

    def capture(*args, **kwargs):
        grads.append([p.grad.clone() for p in params])
        return step(*args, **kwargs)

    updater.optimizer.step = capture
    rows = _rows_of(ctx, split)  # this rank's contiguous block of the whole batch
    metrics = updater.update(samples, slice(rows[0], rows[-1] + 1) if rows else slice(0, 0))
    return metrics, [p.detach().clone() for p in params], grads


CASES = (("gagpo", "groups"), ("gagpo", "all-on-rank-0"), ("ppo", "groups"),
         ("gagpo", "score-groups"), ("gagpo", "score-all-on-rank-0"), ("ppo", "score-groups"),
         ("gagpo", "groups-m4"), ("ppo", "groups-m4"), ("gagpo", "score-groups-m4"), ("ppo", "score-groups-m4"))


def _worker(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        ctx = Dist(rank, world)
        results = {}
        for estimator, split in CASES:
            metrics, params, grads = _update(ctx, estimator, split)
            results[estimator, split] = {"metrics": metrics, "params": gather(params, ctx),
                                         "grads": gather(grads, ctx)}
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> dict:
    """Every case run by 2 gloo processes (one spawn for all, to pay the start-up once)."""
    tmp_path = tmp_path_factory.mktemp("ddp")
    out = tmp_path / "results.pt"
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    return torch.load(out)


def test_task_shards_keep_rollout_groups_whole():
    tasks = [TaskSpec("train", g, 7, g) for g in range(3) for _ in range(2)]
    (first, start0), (second, start1) = (shard_tasks(tasks, Dist(r, 2)) for r in range(2))
    assert [t.group_id for t in first] == [0, 0] and start0 == 0
    assert [t.group_id for t in second] == [1, 1, 2, 2] and start1 == 2
    with pytest.raises(UsageError, match="tasks_per_batch"):
        shard_tasks(tasks[:2], Dist(0, 2))  # one group for two processes


def test_shard_gives_contiguous_whole_groups():
    assert [list(shard(5, Dist(r, 2))) for r in range(2)] == [[0, 1], [2, 3, 4]]
    assert [list(shard(1, Dist(r, 3))) for r in range(3)] == [[], [], [0]]
    assert list(shard(7, Dist())) == list(range(7))


def _check(results: dict, estimator: str, split: str) -> None:
    two = results[estimator, split]
    one_metrics, one_params, one_grads = _update(Dist(), estimator, split)
    rank0, rank1 = two["params"]
    for a, b, single in zip(rank0, rank1, one_params, strict=True):
        assert torch.equal(a, b)  # the ranks stay identical without broadcasting weights
        assert torch.allclose(a, single, rtol=1e-4, atol=1e-6), (a - single).abs().max()
    if split.startswith("score"):  # lr 0 (SCORE_OPTIM): every step's summed gradient is the one-process one
        steps = 2 * (MINI_BATCHES if split.endswith("-m4") else 1)  # epochs x mini-batches
        assert len(one_grads) == steps and any(g.abs().sum() > 0 for g in one_grads[0])
        assert all(torch.equal(a, b) for s0, s1 in zip(*two["grads"], strict=True) for a, b in zip(s0, s1, strict=True))
        for two_step, one_step in zip(two["grads"][0], one_grads, strict=True):
            for a, single in zip(two_step, one_step, strict=True):
                torch.testing.assert_close(a, single, rtol=1e-4, atol=1e-7)
    else:
        initial = _update_free_params(estimator, split)
        assert any(not torch.allclose(s, i, atol=1e-4) for s, i in zip(one_params, initial, strict=True))  # moved
    keys = ["actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm", "actor/clipfrac",
            "actor/rollout_probs_diff_max", "actor/rollout_probs_diff_mean"]
    if split.startswith("score") or split.endswith("-m4"):
        keys += ["actor/update_rows", "actor/optimizer_steps"]
    if estimator == "ppo":
        keys += ["critic/value_loss", "critic/grad_norm"]
    for key in keys:
        assert abs(two["metrics"][key] - one_metrics[key]) < 1e-4 * max(1.0, abs(one_metrics[key])), key


def _update_free_params(estimator: str, split: str) -> list[torch.Tensor]:
    updater, _ = _updater(estimator, split)
    params = [p.detach().clone() for p in updater.params]
    if updater.critic is not None:
        params += [p.detach().clone() for p in updater.critic.head.parameters()]
    return params


def test_two_gloo_processes_update_as_one_process(two_processes):
    _check(two_processes, "gagpo", "groups")


def test_a_rank_without_rows_still_takes_part(two_processes):
    _check(two_processes, "gagpo", "all-on-rank-0")


def test_token_ratio_loss_and_critic_update_as_one_process(two_processes):
    _check(two_processes, "ppo", "groups")


@pytest.mark.parametrize("estimator, split", [("gagpo", "score-groups"), ("gagpo", "score-all-on-rank-0"),
                                              ("ppo", "score-groups")])
def test_score_mode_updates_as_one_process(two_processes, estimator, split):
    _check(two_processes, estimator, split)


@pytest.mark.parametrize("estimator, split", [("gagpo", "groups-m4"), ("ppo", "groups-m4"),
                                              ("gagpo", "score-groups-m4"), ("ppo", "score-groups-m4")])
def test_several_mini_batches_update_as_one_process(two_processes, estimator, split):
    """optim.mini_batches > 1: the mini-batches are dealt over the whole batch, each rank computing its
    own rows of each, so every optimizer step's summed gradient is the one-process step's."""
    _check(two_processes, estimator, split)


# ---------------------------------------------------------------------------- the trainer under torchrun's variables

TRAIN = ["model.name=tiny-random", "env.name=corridor", "rollout.tasks_per_batch=3", "rollout.group_size=2",
         "env.max_steps=2", "rollout.max_new_tokens=6", "train.iterations=2", "train.eval_every=0",
         "train.eval_episodes=0", "train.save_every=1", "optim.lr=1e-3", "rollout.engine=hf"]


SCORE_TRAIN = ["model.name=bow-mlp", "rollout.action_mode=score"]  # the featurised policy ranks actions


def _train_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    """Both modes' runs, one after the other, in one process group (``out_dir``/<mode>)."""
    import os

    from envs.corridor import CorridorEnvironment

    from environments.pool import EnvPool
    from gagpo_cli.config import load_config
    from gagpo_cli.train.recipe import train

    torch.set_num_threads(1)
    os.environ.update({"WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    try:
        with EnvPool.from_environment(CorridorEnvironment()) as pool:
            train(load_config(None, [*TRAIN, f"logging.output_dir={out_dir}/generate"]), policy=tiny_policy(),
                  env_pool=pool)
        with EnvPool.from_environment(CorridorEnvironment()) as pool:
            train(load_config(None, [*TRAIN, *SCORE_TRAIN, f"logging.output_dir={out_dir}/score"]), env_pool=pool)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory) -> Path:
    """The folder of both modes' 2-process runs (one spawn for both, to pay the start-up once)."""
    out = tmp_path_factory.mktemp("two-process-runs")
    mp.spawn(_train_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    return out


@pytest.mark.parametrize("mode, weights", [("generate", "adapter_model.safetensors"), ("score", "model.safetensors")])
def test_two_process_training_run(two_process_runs, mode, weights):
    """torchrun's environment: rank 0 writes the run with the whole batch's records and the checkpoints'
    weights, rank 1 keeps its own records and random states under ranks/ (generate mode with the tiny
    model, score mode with the featurised policy)."""
    from safetensors.torch import load_file

    from gagpo_cli.train.records import read_metrics

    run_dir = two_process_runs / mode / "default-gagpo-corridor-s0"
    lines = read_metrics(run_dir)
    assert [m["iteration"] for m in lines] == [1, 2]
    assert all(m["train/step_rows"] == 3 * 2 * 2 for m in lines)  # every rank's rows, gathered
    assert all(m["train/episodes"] == 6 for m in lines)
    rank1 = run_dir / "ranks" / "rank1"
    assert [m["iteration"] for m in read_metrics(rank1)] == [1, 2]
    a = load_file(run_dir / "checkpoints" / "iter_000002" / "policy" / weights)
    # rank 0 alone writes the weights and optimizer state every rank holds; rank 1 its random states
    kept = sorted(p.name for p in (rank1 / "checkpoints" / "iter_000002").iterdir())
    assert kept == ["manifest.json", "rng.json"]
    first = load_file(run_dir / "checkpoints" / "iter_000001" / "policy" / weights)
    assert any(not torch.equal(first[k], a[k]) for k in a)  # it trained
