"""``model.parallel: fsdp`` in the trainer: two gloo processes with the tiny policy sharded (FSDP2) make
the one-process update (LoRA and full fine-tuning with its sharded reference copy, one and two
mini-batches, a rank without rows included), agree on every count that decides how many collectives
run (the calibration's probe size, an evaluation's turns) even when one rank's timer or sampling
differs, generate in lock-step what one process generates (gathering the weights once), save /
resume sharded checkpoints that continue exactly as the uninterrupted run, and ``gagpo train`` under
torchrun's variables resumes a sharded run to the metrics of the uninterrupted one."""

from __future__ import annotations

import dataclasses
import datetime
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support import random_generate_batch
from tiny_model import tiny_policy

from environments.base import Environment, Episode, Reset, Step
from estimators import get_estimator
from gagpo_cli.config import ModelConfig, OptimConfig
from gagpo_cli.train import sharding
from gagpo_cli.train.checkpoint import capture_rng, load_checkpoint, save_checkpoint
from gagpo_cli.train.distributed import Dist, gather, shard
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater

GROUPS, K = 4, 3
OPTIM = OptimConfig(lr=1e-2, kl_coef=0.05, entropy_coef=0.01, epochs=2, token_budget=60)
LORA = ModelConfig(name="tiny-random", lora_rank=4, lora_alpha=8, dtype="float32", device="cpu")
FULL = dataclasses.replace(LORA, lora=False)
FSDP = dataclasses.replace(LORA, parallel="fsdp")
PROMPTS = [[5, 9, 14, 3], [7, 7, 21], [30, 2, 8, 11, 19, 4]]

pytestmark = pytest.mark.integration  # two worker processes


def _batch() -> list[GenerateSample]:
    """GROUPS x K generate-mode rows (tests/support.py)."""
    return random_generate_batch(GROUPS * K, value_targets=False)


def _own(ctx: Dist, split: str) -> slice | None:
    """The rows a rank computes (the whole batch is every rank's ``samples``); one process: all."""
    if not ctx.enabled:
        return None
    if split == "all-on-rank-0":  # the other rank has nothing to train on and still takes part
        return slice(0, GROUPS * K) if ctx.rank == 0 else slice(0, 0)
    groups = shard(GROUPS, ctx)  # whole rollout groups per rank
    return slice(groups.start * K, groups.stop * K)


def _updater(kind: str, ctx: Dist, mini_batches: int = 1) -> GenerateUpdater:
    """A fresh policy of ``kind`` (lora / full), sharded over ``ctx`` (one process: not sharded), and its
    updater."""
    policy = tiny_policy(FULL if kind == "full" else LORA)
    policy.shard(ctx, FSDP)
    optim = dataclasses.replace(OPTIM, mini_batches=mini_batches)
    return GenerateUpdater(policy, get_estimator("gagpo"), optim, dist=ctx)


def _weights(updater: GenerateUpdater, ctx: Dist) -> dict[str, torch.Tensor]:
    """The trained weights, gathered (every rank calls it)."""
    trained = {n for n, p in updater.policy.model.named_parameters() if p.requires_grad}
    return sharding.full_state_dict(updater.policy.model, ctx, every_rank=True, keys=trained.__contains__)


def _update(kind: str, split: str, mini_batches: int, ctx: Dist) -> tuple[dict[str, float], dict]:
    updater = _updater(kind, ctx, mini_batches)
    metrics = updater.update(_batch(), own=_own(ctx, split))
    return metrics, _weights(updater, ctx)


def _resumed(kind: str, ctx: Dist, run_dir: Path) -> dict[str, list]:
    """Two updates straight, against one update, a sharded checkpoint, a fresh sharded policy loading
    it and the second update: the weights after the second update of each (every rank)."""
    own = _own(ctx, "groups")
    straight = _updater(kind, ctx)
    straight.update(_batch(), own=own)
    straight.update(_batch(), own=own)
    first = _updater(kind, ctx)
    first.update(_batch(), own=own)
    saved = save_checkpoint(run_dir, 1, first.policy, first, capture_rng())
    resumed = _updater(kind, ctx)
    assert load_checkpoint(saved, resumed.policy, resumed).iteration == 1
    resumed.update(_batch(), own=own)
    return {"straight": _weights(straight, ctx), "resumed": _weights(resumed, ctx),
            "files": sorted(str(p.relative_to(saved)) for p in saved.rglob("*") if p.is_file())}


def _generate(ctx: Dist, prompts: list[list[int]], temperature: float) -> list:
    policy = tiny_policy(LORA)
    policy.shard(ctx, FSDP)
    generator = torch.Generator().manual_seed(3)
    return [(g.response_ids, g.truncated) for g in policy.generate(prompts, temperature=temperature,
                                                                  max_new_tokens=9, generator=generator)]


UPDATE_CASES = (("lora", "groups", 1), ("full", "groups", 1), ("lora", "all-on-rank-0", 1),
                ("full", "all-on-rank-0", 1), ("lora", "groups", 2), ("full", "groups", 3))
TRAIN = ["model.name=tiny-random", "env.name=corridor", "rollout.tasks_per_batch=3", "rollout.group_size=2",
         "env.max_steps=3", "rollout.max_new_tokens=6", "train.eval_every=0", "train.eval_episodes=0",
         "train.save_every=1", "optim.lr=1e-3", "optim.mini_batches=2", "rollout.engine=hf",
         "model.parallel=fsdp"]


def _train_runs(rank: int, port: int, out_dir: Path) -> None:
    """``gagpo train`` as torchrun starts it on 2 ranks: 3 iterations straight, and 2 iterations then a
    resume to 3 (fresh policies each)."""
    import os

    from envs.corridor import CorridorEnvironment

    from environments.pool import EnvPool
    from gagpo_cli.config import load_config
    from gagpo_cli.train.recipe import train

    os.environ.update({"WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    for name, iterations, resume in (("straight", 3, False), ("resumed", 2, False), ("resumed", 3, True)):
        cfg = load_config(None, [*TRAIN, f"train.iterations={iterations}", f"logging.output_dir={out_dir}",
                                 f"logging.run_name={name}"])
        with EnvPool.from_environment(CorridorEnvironment()) as pool:
            train(cfg, policy=tiny_policy(LORA), env_pool=pool, resume=resume)


class ParityEpisode(Episode):
    """Ends when the answer has an even number of characters: sampling decides each episode's length."""

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        return Reset("Say something.", (), "say", "start", "say something", task_id)

    def step(self, action: str) -> Step:
        return Step("Go on.", 0.0, len(action) % 2 == 0, False, 0.0, True, (), "on")

    def expert_action(self) -> str:
        return "ok"


class ParityEnvironment(Environment):
    name = "parity"
    description = "episodes whose length follows the sampled answers (lock-step tests)"
    max_steps = 5
    task_types = ("say",)
    splits = ("test",)
    reads_answers = True  # the whole answer reaches step()

    def num_tasks(self, split: str) -> int:
        return 4

    def new_episode(self) -> ParityEpisode:
        return ParityEpisode()


def _lock_step_decisions(ctx: Dist) -> dict:
    """Counts that decide how many collectives run, with each rank's timer or sampling perturbed: the
    calibration's doubling (rank 1's prompt pass always 'slow enough') and a sharded evaluation whose
    agents sample with each rank's own seed. Neither may hang; both end the same on every rank."""
    from environments.pool import EnvPool
    from gagpo_cli.config import load_config
    from gagpo_cli.train.evaluation import evaluate_policy
    from gagpo_cli.train.forecast import calibrate

    policy = tiny_policy(LORA)
    policy.shard(ctx, FSDP)
    cost = calibrate(policy, PROMPTS[2], 8, fast_s=1e9 if ctx.rank == 0 else 0.0, ctx=ctx)
    cfg = load_config(None, ["model.name=tiny-random", "model.parallel=fsdp", "env.name=parity",
                             "train.eval_episodes=4", "rollout.tasks_per_batch=2", "rollout.group_size=2",
                             "rollout.eval_temperature=1.0", "rollout.max_new_tokens=5",
                             f"train.seed={ctx.rank}"])  # each rank samples other answers
    with EnvPool.from_environment(ParityEnvironment()) as pool:
        evaluation = evaluate_policy(cfg, policy, pool, "test", ctx)
    return {"rows": cost.rows, "lengths": [e["length"] for e in evaluation["per_episode"]],
            "gathers": _gathers_in_generate(policy, ctx)}


def _gathers_in_generate(policy, ctx: Dist) -> tuple[int, int]:
    """(FSDP units, unit gathers made by one sampled ``generate`` of 9 tokens on rows that stop at
    different steps): FSDP2's parameter-group unshards that gathered."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    original, count = FSDPParamGroup.unshard, [0]

    def counting(self, *args, **kwargs):
        count[0] += not (self.is_unsharded or self._all_gather_result is not None)
        return original(self, *args, **kwargs)

    FSDPParamGroup.unshard = counting
    try:
        policy.generate(PROMPTS[: 1 + ctx.rank], temperature=1.0, max_new_tokens=9,
                        generator=torch.Generator().manual_seed(ctx.rank))
    finally:
        FSDPParamGroup.unshard = original
    units = sum(isinstance(m, FSDPModule) for m in sharding.causal_lm(policy.model).modules())
    return units, count[0]


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    # a rank left waiting in a collective fails after two minutes instead of hanging the suite
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    try:
        ctx = Dist(rank, 2)
        results: dict = {"lock_step": gather(_lock_step_decisions(ctx), ctx)}
        for kind, split, mini_batches in UPDATE_CASES:
            results[kind, split, mini_batches] = _update(kind, split, mini_batches, ctx)
        # Lock-step generation: rank 0 has all three prompts and rank 1 none, then one each with lengths
        # that stop at different steps.
        results["generate"] = gather(_generate(ctx, PROMPTS if rank == 0 else [], 0.0), ctx)
        results["sampled"] = gather(_generate(ctx, [PROMPTS[rank]], 1.0), ctx)
        run_dir = Path(out).parent / ("run" if rank == 0 else "run/ranks/rank1")
        for kind in ("lora", "full"):
            results["resume", kind] = _resumed(kind, ctx, run_dir / kind)
        _train_runs(rank, port, Path(out).parent / "train")
        results["train"] = str(Path(out).parent / "train")
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict:
    """Every case run by 2 gloo processes (one spawn for all, to pay the start-up once)."""
    out = tmp_path_factory.mktemp("fsdp") / "results.pt"
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=2, join=True)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("kind, split, mini_batches", UPDATE_CASES)
def test_a_sharded_update_is_the_one_process_update(two_ranks, kind, split, mini_batches):
    metrics, weights = two_ranks[kind, split, mini_batches]
    one_metrics, one_weights = _update(kind, split, mini_batches, Dist())
    initial = _weights(_updater(kind, Dist()), Dist())
    assert weights.keys() == one_weights.keys()
    moved = max(float((one_weights[k] - initial[k]).abs().max()) for k in initial)
    assert moved > 1e-3  # it trained
    for key in weights:  # AdamW turns float summation-order noise on tiny gradients into lr-sized steps
        torch.testing.assert_close(weights[key], one_weights[key], rtol=1e-4, atol=1e-5 * moved / OPTIM.lr)
    for key in ("actor/pg_loss", "actor/kl", "actor/entropy", "actor/grad_norm", "actor/clipfrac",
                "actor/rollout_probs_diff_max", "actor/update_rows"):
        assert metrics[key] == pytest.approx(one_metrics[key], rel=1e-4, abs=1e-6), key


def test_counts_that_decide_collectives_are_agreed_by_the_ranks(two_ranks):
    rank0, rank1 = two_ranks["lock_step"]
    assert rank0["rows"] == rank1["rows"] == 2  # rank 1's slow prompt pass stopped the doubling for both
    assert rank0["lengths"] == rank1["lengths"]  # every rank took rank 0's actions at every turn
    assert len(set(rank0["lengths"])) > 1  # sampling did decide the episodes' lengths
    for units, gathers in (rank0["gathers"], rank1["gathers"]):  # one generate: each unit gathered once
        assert units == 3 and gathers == units  # two decoder layers and the root unit


def test_generation_runs_in_lock_step_and_equals_one_process(two_ranks):
    rank0, rank1 = two_ranks["generate"]
    assert rank1 == [] and rank0 == _generate(Dist(), PROMPTS, 0.0)
    sampled = two_ranks["sampled"]
    assert [s[0] for s in sampled] == [_generate(Dist(), [PROMPTS[r]], 1.0)[0] for r in range(2)]


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_a_sharded_checkpoint_resumes_to_the_uninterrupted_weights(two_ranks, kind):
    result = two_ranks["resume", kind]
    assert result["straight"].keys() == result["resumed"].keys()
    for key, value in result["straight"].items():
        torch.testing.assert_close(result["resumed"][key], value, rtol=0, atol=0)
    files = result["files"]
    assert any(f.startswith("sharded/") and f.endswith(".distcp") for f in files)
    assert "manifest.json" in files and any(f.startswith("policy/") for f in files)


def test_a_sharded_training_run_resumes_to_the_uninterrupted_metrics(two_ranks):
    from gagpo_cli.train.records import read_metrics

    root = Path(two_ranks["train"])
    straight, resumed = read_metrics(root / "straight"), read_metrics(root / "resumed")
    assert [m["iteration"] for m in straight] == [m["iteration"] for m in resumed] == [1, 2, 3]
    checkpoint = root / "resumed" / "checkpoints" / "iter_000002"
    assert any(p.suffix == ".distcp" for p in (checkpoint / "sharded").iterdir())
    for a, b in zip(straight, resumed, strict=True):
        same = {k for k in a if not k.startswith(("timing/", "perf/"))}
        assert same and {k: a[k] for k in same} == {k: b[k] for k in same}


def test_activation_checkpointing_keeps_the_one_process_update():
    """``model.activation_checkpointing`` (one process: the only change ``shard`` makes) recomputes each
    decoder layer in backward: the same update."""
    plain = _updater("lora", Dist())
    checkpointed = _updater("lora", Dist())
    checkpointed.policy.shard(Dist(), dataclasses.replace(FSDP, activation_checkpointing=True))
    model = checkpointed.policy.base_model
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    metrics = [u.update(_batch()) for u in (plain, checkpointed)]
    assert metrics[0]["actor/grad_norm"] == pytest.approx(metrics[1]["actor/grad_norm"], rel=1e-6)
    for a, b in zip(plain.params, checkpointed.params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
