"""Multi-process training with ``torch.distributed`` (launched by ``torchrun``): data parallel.

Contract (what makes N processes train exactly as one process on the same batch):

1. Every rank holds the same policy (same seed, so the same LoRA initialisation) and the same config.
2. Each iteration's N task instances x K rollouts are split by WHOLE rollout groups into contiguous
   blocks, one block per rank (``shard``); each rank rolls out only its block.
3. The step rows (and episode records) are gathered to every rank (``gather``), in rank order, with
   trajectory ids made global, so the estimator sees the whole batch with whole rollout groups
   (also what batch-normalised estimators need) and every rank computes the same advantages.
4. Each rank computes the loss of its OWN rows, each share divided by the WHOLE batch's action and
   token counts (``sum_counts``); after accumulation the gradients of the trainable parameters are
   SUMMED over ranks (``all_reduce_sum``). The sum of per-row shares normalised by global counts is
   the one-process loss, so the summed gradient is the one-process gradient (DDP's averaging, with
   the averaging folded into the denominators); clipping and the optimizer step then run on the
   same gradient on every rank, and the weights stay identical without broadcasting them.
5. Every rank keeps its own records and checkpoints (ranks > 0 under ``<run>/ranks/rank<r>/``), all
   saving the same iterations; rank 0 plays the evaluations and hands the result to the others
   (``train/evaluation.py``).
6. Mini-batches are dealt by row index in the WHOLE batch (``learning/planning.py``), each rank
   computing its own rows of each, so the update is the one-process update with any
   ``optim.mini_batches``.

Backends follow the policy's device (``backend_for``): ``nccl`` (with gloo for CPU tensors) when the
policy is on a GPU, ``gloo`` when it is on the CPU, even where CUDA is visible (a CPU policy's
gradients are CPU tensors, which NCCL rejects). One process is the plain path: ``Dist()`` (world
size 1) makes every helper here a no-op.

Ranks agree on every decision that changes what they do next: ``agree_any`` / ``agree_stop`` (any
rank's stop or failure is every rank's, at iteration and rollout-turn boundaries; the turns go on while
any rank has live episodes) and ``agree_same`` (e.g. the iteration a resume starts from; differing
values are refused with one line). A rank that fails where the others wait in a collective hands its
failure through that collective, so no rank is left waiting (``StoppedElsewhere`` on the others).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import RunLayout

T = TypeVar("T")


@dataclass(frozen=True)
class Dist:
    """This process's place in the job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


GPU_BACKEND = "cpu:gloo,cuda:nccl"  # NCCL for GPU tensors; gloo for CPU ones (FSDP2's offloaded shards)


def backend_for(policy_device: torch.device | str) -> str:
    """The collective backend for a policy on ``policy_device``: a GPU's collectives run on NCCL, with
    gloo for CPU tensors (``model.offload_optimizer`` keeps FSDP2 shards on the CPU, and clipping or
    gathering them is a collective on CPU tensors, which NCCL alone rejects); a CPU policy's on gloo."""
    return GPU_BACKEND if torch.device(policy_device).type == "cuda" else "gloo"


def init_from_env(policy_device: torch.device | str, timeout_minutes: float = 60.0) -> Dist:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
    ``MASTER_ADDR``/``PORT``) with the backend of a policy on ``policy_device``; a GPU policy's rank
    uses ``cuda:LOCAL_RANK``. Without ``WORLD_SIZE`` > 1, the one-process ``Dist()``. Idempotent."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        backend = backend_for(policy_device)
        if "nccl" in backend:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return Dist(rank=dist.get_rank(), world_size=dist.get_world_size())


def shard(groups: int, ctx: Dist) -> range:
    """The rollout groups of this rank: a contiguous block of ``range(groups)``, sizes differing by at
    most one (rank r gets groups [r*n/W, (r+1)*n/W)). A rank may get none when groups < world size."""
    start = groups * ctx.rank // ctx.world_size
    stop = groups * (ctx.rank + 1) // ctx.world_size
    return range(start, stop)


def gather(obj: T, ctx: Dist) -> list[T]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank; ``[obj]`` when not distributed."""
    if not ctx.enabled:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(tensors: Sequence[torch.Tensor], ctx: Dist) -> None:
    """Sum ``tensors`` over ranks, in place, in one flat collective."""
    if not ctx.enabled or not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t).to(t.dtype))
        offset += n


def all_reduce_grads(params: Sequence[torch.nn.Parameter], ctx: Dist) -> None:
    """Sum the gradients of ``params`` over ranks (a rank without a gradient contributes zeros)."""
    if not ctx.enabled:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    all_reduce_sum([p.grad for p in params], ctx)


def collective_device() -> torch.device:
    """Where a collective's tensors live: this rank's GPU under NCCL, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in dist.get_backend() else torch.device("cpu")


def sum_counts(values: Sequence[float], ctx: Dist) -> list[float]:
    """Sum of each value over ranks (float64), e.g. the batch's action and token counts."""
    if not ctx.enabled:
        return [float(v) for v in values]
    t = torch.tensor(list(values), dtype=torch.float64, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return [float(v) for v in t.tolist()]


def agree_any(flags: Sequence[bool], ctx: Dist) -> list[bool]:
    """Each flag true on every rank when it is true on any rank (one collective for all of them;
    every rank must call it with the same number of flags)."""
    if not ctx.enabled:
        return [bool(f) for f in flags]
    t = torch.tensor([int(f) for f in flags], device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def agree_stop(stop: bool, ctx: Dist) -> bool:
    """True on every rank when ``stop`` is true on any rank (one collective; every rank must call it)."""
    return agree_any([stop], ctx)[0]


class StoppedElsewhere(Exception):
    """Another rank failed (its own error says why) and every rank agreed to stop: this one stops
    cleanly, saving what it would save for a Ctrl-C."""


def from_main(obj: T, ctx: Dist) -> T:
    """Rank 0's ``obj`` (picklable) on every rank; the other ranks wait in this collective."""
    if not ctx.enabled:
        return obj
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@dataclass(frozen=True)
class _TensorSlot:
    """A tensor's place in a state sent by ``state_from_main``."""

    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype


def state_from_main(state: Any, ctx: Dist) -> Any:
    """Rank 0's ``state`` (nested dicts, lists and tuples of tensors and picklable values, e.g. an
    optimizer's ``state_dict``) on every rank, its tensors on the CPU: the structure goes by
    ``from_main``, each tensor by its own broadcast on the collective device (never one pickle of
    gigabytes). Every rank calls it; the other ranks' ``state`` is not read."""
    if not ctx.enabled:
        return state
    tensors: list[torch.Tensor] = []

    def strip(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            tensors.append(x)
            return _TensorSlot(len(tensors) - 1, tuple(x.shape), x.dtype)
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(strip(v) for v in x)
        return x

    skeleton = from_main(strip(state) if ctx.is_main else None, ctx)
    device = collective_device()

    def fill(x: Any) -> Any:
        if isinstance(x, _TensorSlot):
            t = (tensors[x.index].detach().to(device).contiguous() if ctx.is_main
                 else torch.empty(x.shape, dtype=x.dtype, device=device))
            dist.broadcast(t, src=0)
            return t.cpu()
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(fill(v) for v in x)
        return x

    return fill(skeleton)


def tensors_from_main(tensors: Sequence[torch.Tensor], ctx: Dist) -> None:
    """Rank 0's values of ``tensors`` (the same shapes on every rank, e.g. the trained parameters)
    copied in place into every rank's, one broadcast each."""
    if not ctx.enabled:
        return
    device = collective_device()
    with torch.no_grad():
        for t in tensors:
            buffer = t.detach().to(device).contiguous()
            dist.broadcast(buffer, src=0)
            t.copy_(buffer.to(t.device))


def agree_same(value: Any, what: str, ctx: Dist) -> Any:
    """``value``, when every rank holds the same one; else a ``UsageError`` listing each rank's."""
    values = gather(value, ctx)
    if any(v != values[0] for v in values):
        found = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise UsageError(f"the training processes disagree on {what} ({found})")
    return value


def fail_together(problem: UsageError | None, ctx: Dist) -> None:
    """Raise on every rank when any rank has a ``problem`` (one collective): a rank raises its own, the
    others a ``UsageError`` naming the rank and its problem, so that no rank waits for one that left."""
    problems = gather(str(problem) if problem is not None else None, ctx)
    if problem is not None:
        raise problem
    for rank, message in enumerate(problems):
        if message is not None:
            raise UsageError(f"training process {rank}: {message}")


def barrier(ctx: Dist) -> None:
    if ctx.enabled:
        dist.barrier()


def shutdown(ctx: Dist) -> None:
    """Leave the process group (end of training)."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- the trainer's side


def current() -> Dist:
    """This process's ``Dist``: from the initialised process group, else one process."""
    if dist.is_available() and dist.is_initialized():
        return Dist(rank=dist.get_rank(), world_size=dist.get_world_size())
    return Dist()


def rank_config(cfg: Any, run_dir_name: str, ctx: Dist) -> Any:
    """The config a rank > 0 trains with: its records, checkpoints and evaluations go to
    ``<output_dir>/<run>/ranks/rank<r>/`` (W&B off), so rank 0's run directory is the run's. Every
    rank keeps its own checkpoints, so ``--resume`` works without a shared filesystem."""
    import copy

    out = copy.deepcopy(cfg)
    out.logging.output_dir = str(RunLayout(Path(cfg.logging.output_dir) / run_dir_name).ranks)
    out.logging.run_name = f"rank{ctx.rank}"
    out.logging.wandb = "disabled"
    return out


def shard_tasks(tasks: Sequence[Any], ctx: Dist) -> tuple[list[Any], int]:
    """This rank's block of whole rollout groups from the iteration's task list (ordered group by
    group, as ``recipe.sample_tasks`` makes it), and the index of its first task in the whole list
    (its trajectory-id offset)."""
    if not ctx.enabled:
        return list(tasks), 0
    groups = list(dict.fromkeys(t.group_id for t in tasks))
    if len(groups) < ctx.world_size:
        raise UsageError(f"rollout.tasks_per_batch ({len(groups)}) must be at least the number of "
                         f"training processes ({ctx.world_size})")
    mine = {groups[g] for g in shard(len(groups), ctx)}
    index = [i for i, t in enumerate(tasks) if t.group_id in mine]
    if index != list(range(index[0], index[0] + len(index))):
        raise ValueError("shard_tasks: the tasks of a rollout group must be contiguous")
    return [tasks[i] for i in index], index[0]


def gather_rollout(rollout: Any, offset: int, ctx: Dist) -> tuple[Any, slice]:
    """Every rank's ``Rollout`` merged in rank order (trajectory ids made global with each rank's
    offset; generated tokens summed; generate/env seconds the slowest rank's), and the slice of the
    merged rows this rank generated (the rows it trains on)."""
    if not ctx.enabled:
        return rollout, slice(0, len(rollout.rows))
    import dataclasses

    parts = gather((rollout, offset), ctx)
    rows: list[Any] = []
    episodes: list[Any] = []
    own = slice(0, 0)
    for rank, (part, part_offset) in enumerate(parts):
        if rank == ctx.rank:
            own = slice(len(rows), len(rows) + len(part.rows))
        rows += [dataclasses.replace(r, traj_id=r.traj_id + part_offset) for r in part.rows]
        episodes += part.episodes
    merged = dataclasses.replace(
        rollout, rows=rows, episodes=episodes,
        generated_tokens=sum(p.generated_tokens for p, _ in parts),
        generate_s=max(p.generate_s for p, _ in parts), env_s=max(p.env_s for p, _ in parts))
    return merged, own
