"""Sharded training with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``): every rank holds 1/N
of the parameters, gradients and optimizer state, and gathers one decoder layer at a time.

Contract (on top of ``distributed.py``'s: each rank's loss share is divided by the WHOLE batch's counts):

1. ``shard_model`` makes each decoder layer one FSDP unit and the causal LM itself the root unit
   (embeddings, final norm, output projection). Gradients are reduce-scattered as a SUM over ranks
   (divide factor 1, sum-only collectives), so the summed shares give the one-process gradient;
   ``clip_grad_norm`` and ``torch.optim.AdamW`` then run on the shards (DTensors) and compute what one
   process computes on the whole tensors (up to float summation order).
2. Precision: with ``mixed_precision`` (a policy under bf16 autocast) the decoder layers are gathered
   in bf16 and their gradients reduced in float32, their inputs left to autocast; the root unit is
   gathered in its stored dtype (float32 master weights when fully trained), so the output
   projection that yields training log-probs stays float32 as in ``policies/lm.py``. A unit whose
   parameters have different stored dtypes (a bf16 LoRA base with float32 adapters) is gathered in
   float32 when ``mixed_precision`` is off.
3. Lock-step: every collective is called by every rank the same number of times in the same order. A
   sharded model's forward gathers each unit (a collective) and its backward reduce-scatters each
   unit's gradients, so EVERY RANK RUNS THE SAME NUMBER OF FORWARDS (and backwards): micro-batch
   counts are agreed with ``agreed_count`` and a rank with fewer runs ``idle_pass`` for the rest
   (zero gradient, same collectives); generation steps while ``any_busy`` says some rank still
   generates, an idle rank running ``idle_pass(model, backward=False)`` (the ``synced_gpus`` pattern
   of transformers' ``generate``); inside ``gathered`` the units stay gathered after their first
   forward, so a generation loop gathers once.
4. Code that calls a sub-module (``model.get_decoder()``) or reads a root weight
   (``get_output_embeddings().weight``) instead of calling the model must run inside ``root_call``:
   the root unit's parameters are gathered around it and its gradients reduced in backward.
5. Weights: ``full_tensors`` / ``full_state_dict`` gather the full tensors (for the rollout engine
   and for export); ``save_sharded`` / ``load_sharded`` write and read the trained parameters and the
   optimizer state with ``torch.distributed.checkpoint`` (one file per rank plus metadata, in one
   folder that every rank can reach: a shared filesystem, e.g. one host). A checkpoint saved on N
   ranks loads on any other number of ranks, one process included (the metadata records each
   shard's place in the full tensor).

One process (``Dist()``, world size 1) is the plain path: ``shard_model`` returns the model untouched and
every helper here acts locally.
"""

from __future__ import annotations

import contextlib
import shutil
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from gagpo_cli.train.distributed import Dist, agree_stop, barrier, collective_device

T = TypeVar("T")

ROOT_CALL = "gagpo_root_call"
"""The name of the method ``shard_model`` adds to the root unit for ``root_call``."""


# ---------------------------------------------------------------------------- sharding


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM (LoRA-injected or not): ``get_decoder().layers``."""
    get_decoder = getattr(model, "get_decoder", None)
    layers = getattr(get_decoder(), "layers", None) if callable(get_decoder) else None
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"cannot shard {type(model).__name__}: it has no get_decoder().layers list")
    return layers


def causal_lm(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (``get_base_model``), else ``model`` itself: the
    module that becomes the root unit."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _gather_dtype(params: list[nn.Parameter], mixed_precision: bool) -> torch.dtype | None:
    """The dtype a unit's parameters are gathered (and computed) in: bf16 under mixed precision, else
    their stored dtype when they share one (None), else float32 (exact for every stored dtype)."""
    if mixed_precision:
        return torch.bfloat16
    return None if len({p.dtype for p in params}) <= 1 else torch.float32


def shard_model(model: nn.Module, ctx: Dist, *, mixed_precision: bool = False,
                activation_checkpointing: bool = False, offload_optimizer: bool = False,
                device: torch.device | str | None = None) -> nn.Module:
    """Shard ``model`` (a transformers causal LM, or a peft model around one) over the ranks of ``ctx``,
    in place, and return it: each decoder layer becomes one FSDP unit, then the causal LM the root unit.

    ``mixed_precision``: decoder layers gathered in bf16, gradients reduced in float32, for a policy
    that runs under bf16 autocast (which casts the float32 activations the layers read; they are not
    cast on entry, so the residual stream keeps its one-process dtype); the root unit keeps its
    stored dtype. Without it, a
    layer whose stored dtypes differ (bf16 LoRA base, float32 adapters) computes in float32, more
    precisely than one process computing the base in bf16. ``activation_checkpointing``:
    each decoder layer's activations are recomputed in backward (transformers' non-reentrant
    gradient checkpointing, active in train mode). ``offload_optimizer``: the parameter and gradient
    shards, and so the optimizer state and step, live in CPU memory (FSDP2's ``CPUOffloadPolicy``);
    needs a GPU policy. ``device``: where the shards live (default: where the parameters are); a model
    built on the CPU is moved to a GPU shard by shard, so no GPU holds it whole. Build the optimizer
    AFTER sharding: sharding replaces the module's parameters. With one process (``ctx.enabled``
    false) the model is returned unchanged, apart from activation checkpointing.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    lm = causal_lm(model)
    layers = decoder_layers(lm)
    if activation_checkpointing:
        non_reentrant = {"use_reentrant": False}
        if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5 (the older name is deprecated)
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs=non_reentrant)
        else:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=non_reentrant)
    if not ctx.enabled:
        return model
    device = torch.device(device) if device is not None else next(lm.parameters()).device
    if offload_optimizer and device.type != "cuda":
        raise ValueError("model.offload_optimizer moves optimizer state from a GPU to the CPU: "
                         f"this policy is on {device.type}")
    mesh = init_device_mesh(device.type, (ctx.world_size,))
    offload = CPUOffloadPolicy() if offload_optimizer else OffloadPolicy()

    def policy(dtype: torch.dtype | None) -> MixedPrecisionPolicy:
        # Under mixed precision, autocast casts what the matmuls read and the residual stream keeps the
        # dtype it has in one process; otherwise inputs follow a unit gathered in float32.
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32,
                                    cast_forward_inputs=not mixed_precision)

    for layer in layers:
        dtype = _gather_dtype(list(layer.parameters()), mixed_precision)
        fully_shard(layer, mesh=mesh, mp_policy=policy(dtype), offload_policy=offload)
    in_layers = {id(p) for p in layers.parameters()}
    root_params = [p for p in lm.parameters() if id(p) not in in_layers]
    fully_shard(lm, mesh=mesh, mp_policy=policy(_gather_dtype(root_params, False)), offload_policy=offload)
    for module in lm.modules():
        if isinstance(module, FSDPModule):
            # The trainer divides each rank's share by the whole batch's counts: sum, never average.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    setattr(lm, ROOT_CALL, types.MethodType(_call, lm))
    register_fsdp_forward_method(lm, ROOT_CALL)
    return model


def _call(self: nn.Module, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return fn(*args, **kwargs)


def is_sharded(model: nn.Module) -> bool:
    """True when ``shard_model`` sharded ``model`` (or the causal LM inside it)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(causal_lm(model), FSDPModule)


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Every FSDP unit of a sharded ``model`` gathered by its first forward inside the block and kept
    gathered to the end of it, then resharded: a generation loop gathers the weights (and, offloaded,
    copies them to the GPU) once per ``generate``, not once per token. The whole model is held
    gathered meanwhile (the memory plan's rollout part counts it). Collectives: each unit's gather at
    the first forward, none after. Unsharded models: nothing."""
    from torch.distributed.fsdp import FSDPModule

    lm = causal_lm(model)
    if not is_sharded(lm):
        yield
        return
    units = [m for m in lm.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            if unit is not lm:  # the root unit keeps FSDP2's own setting (it is not resharded after forward)
                unit.set_reshard_after_forward(True, recurse=False)


def root_call(model: nn.Module, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` with the root unit of ``model`` gathered, as in the model's own forward:
    for code that calls ``get_decoder()`` or reads the output projection's weight directly. ``fn``
    must return tensors (or tuples / lists / dicts of tensors): backward through them reduces the
    root unit's gradients. Unsharded models: just the call."""
    lm = causal_lm(model)
    if not is_sharded(lm):
        return fn(*args, **kwargs)
    return getattr(lm, ROOT_CALL)(fn, *args, **kwargs)


# ---------------------------------------------------------------------------- lock-step


def agreed_count(local_count: int, ctx: Dist) -> int:
    """The largest ``local_count`` over ranks: how many micro-batches (forwards) every rank runs."""
    if not ctx.enabled:
        return int(local_count)
    t = torch.tensor([int(local_count)], dtype=torch.int64, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def any_busy(busy: bool, ctx: Dist) -> bool:
    """True on every rank while ``busy`` is true on any rank: the condition of a lock-step loop (one
    collective per call; every rank calls it once per step)."""
    return agree_stop(busy, ctx)



def idle_pass(model: nn.Module, *, backward: bool) -> None:
    """A forward of the model on one token, result discarded, and with ``backward`` a backward of zero
    times its output: the collectives of one micro-batch with a zero gradient contribution, for a
    rank that has no work left while the others still have (run it under the same train/eval mode
    and autocast as the real passes)."""
    lm = causal_lm(model)
    token = torch.zeros((1, 1), dtype=torch.long, device=_input_device(lm))
    with torch.set_grad_enabled(backward):
        logits = lm(input_ids=token, use_cache=False).logits
        if backward:
            (logits.float().sum() * 0.0).backward()


def _input_device(lm: nn.Module) -> torch.device:
    """Where the model's inputs go: the GPU of a sharded model even when its shards are offloaded to
    the CPU, else the device of its parameters."""
    weight = next(lm.parameters())
    mesh = getattr(weight, "device_mesh", None)  # a DTensor's
    if mesh is not None and mesh.device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return weight.device


def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_`` on (sharded or whole) parameters; returns the total norm of
    the gradients before clipping as a float, the same on every rank (a sharded norm is reduced)."""
    from torch.distributed.tensor import DTensor

    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


# ---------------------------------------------------------------------------- weights


def full_tensors(model: nn.Module, *, keys: Callable[[str], bool] | None = None
                 ) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` for each entry of ``model``'s state dict (selected by ``keys``), gathered
    one at a time on every rank, on the device of the model's computation: for pushing weights into
    a rollout engine without holding a second whole copy. Every rank must consume all of it, in order
    (one gather per sharded tensor)."""
    from torch.distributed.tensor import DTensor

    for name, value in model.state_dict().items():
        if keys is not None and not keys(name):
            continue
        yield name, (value.full_tensor() if isinstance(value, DTensor) else value).detach()


def full_state_dict(model: nn.Module, ctx: Dist, *, every_rank: bool = False,
                    keys: Callable[[str], bool] | None = None) -> dict[str, torch.Tensor]:
    """The full (gathered) weights of ``model``'s state dict, copied to the CPU and keyed as the
    unsharded model's ``state_dict``, on rank 0 only (other ranks get ``{}``) unless ``every_rank``;
    ``keys`` selects entries (e.g. LoRA adapters only). Every rank must call it."""
    keep = ctx.is_main or every_rank
    out: dict[str, torch.Tensor] = {}
    for name, value in full_tensors(model, keys=keys):
        if keep:
            out[name] = value.to("cpu", copy=True)
    return out


def save_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                 ctx: Dist) -> Path:
    """Write the TRAINED parameters of ``model`` (frozen ones, e.g. a LoRA base, come from the model
    source) and ``optimizer``'s state, each rank its shards, into ``directory`` with
    ``torch.distributed.checkpoint``, atomically: into the hidden ``.tmp-<name>`` beside it, renamed
    into place by rank 0 once every rank has written (a folder named ``directory`` is always
    complete). Every rank calls it with the same ``directory``, reachable by all."""
    import torch.distributed.checkpoint as dcp

    directory = Path(directory)
    tmp = directory.with_name(f".tmp-{directory.name}")
    if ctx.is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # a save killed half-way
        tmp.mkdir(parents=True)
    barrier(ctx)
    with _quiet_one_process():
        dcp.save(_state_dicts(model, optimizer), checkpoint_id=str(tmp), no_dist=_one_process())
    barrier(ctx)
    if ctx.is_main:
        if directory.exists():  # a resumed run saving the same iteration again
            shutil.rmtree(directory)
        tmp.rename(directory)
    barrier(ctx)
    return directory


def load_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Load what ``save_sharded`` wrote into ``model`` and ``optimizer`` (sharded like the saving job
    or not, on any number of ranks, one process included). Every rank calls it. A folder without the
    checkpoint's metadata is a ``FileNotFoundError`` naming it; a checkpoint of other parameters a
    ``ValueError`` naming one."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    directory = Path(directory)
    if not (directory / ".metadata").is_file():
        raise FileNotFoundError(f"no sharded checkpoint at {directory} (its .metadata file is missing)")
    stored = dcp.FileSystemReader(str(directory)).read_metadata().state_dict_metadata
    state = _state_dicts(model, optimizer)
    absent = [k for k in state["model"] if f"model.{k}" not in stored]  # nested keys are stored joined by "."
    if absent or (optimizer is not None and not any(k.startswith("optimizer.") for k in stored)):
        raise ValueError(f"the sharded checkpoint at {directory} does not hold this model's "
                         f"{absent[0] if absent else 'optimizer state'}")
    with _quiet_one_process():
        dcp.load(state, checkpoint_id=str(directory), no_dist=_one_process())  # in place, into ``state``
    set_model_state_dict(model, state["model"], options=_trained_only())
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, state["optimizer"], options=_trained_only())


def _one_process() -> bool:
    return not (dist.is_available() and dist.is_initialized())


@contextlib.contextmanager
def _quiet_one_process() -> Iterator[None]:
    """Silence torch.distributed.checkpoint's notice that it works in one process (meant here)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _trained_only():
    """Options of ``torch.distributed.checkpoint.state_dict``: trained parameters only."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=False)


def _state_dicts(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """The trained parameters' (and the optimizer's) state keyed by parameter name, sharded tensors as
    DTensors."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state = {"model": get_model_state_dict(model, options=_trained_only())}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer, options=_trained_only())
    return state
