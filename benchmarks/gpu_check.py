"""GPU check: what a multi-GPU training run relies on, in a few minutes, with a tiny random model built
in place (no network, nothing but the repository and its installed extras).

One line per check: ``PASS`` / ``FAIL`` / ``SKIP``, its name and its figures. Checks:

- ``devices``: the visible GPUs (name, memory), the torch / CUDA / NCCL versions;
- ``bf16-autocast``: a float32 matmul against the same under bf16 autocast (relative error) and a
  float32 output projection outside autocast, as the policy computes log-probs;
- ``hf-rollout``: ``Policy.generate`` samples responses and reports each token's log-prob; the training
  forward (``Policy.forward``) recomputes them (max |difference|, the gap PPO ratios start from);
- ``vllm-rollout``: the same with the vLLM engine over the tiny model's folder (where vLLM is installed);
- ``collectives``: all_reduce, all_gather and broadcast over the processes (results exact), and the
  all_reduce bandwidth of a 64 MiB tensor;
- ``ddp-update`` / ``fsdp-update-lora`` / ``fsdp-update-full``: one update of the tiny policy by the
  processes (data parallel with summed gradients; FSDP2 sharding) against the one-process update of the
  same batch on the same device (max |weight difference| relative to how far the weights moved);
  under bf16 autocast on a GPU the tolerance is bf16's.

The multi-process checks run 2 processes: NCCL with one GPU each where 2 GPUs are visible, else gloo on
the CPU (``--cpu`` forces the CPU mode everywhere; GPU-only checks then SKIP). Exit code 1 when any
check FAILs.

    bash scripts/gpu_check.sh            # or: python benchmarks/gpu_check.py [--cpu]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
# benchmarks/estimators.py would shadow the estimators package; testkit/ holds the tiny model builder
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE.parent / "testkit")]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

PROMPTS = [[5, 9, 14, 3], [7, 7, 21], [30, 2, 8, 11, 19, 4], [12, 40, 6]]
ROWS = 12  # step rows of the update checks


def _line(status: str, name: str, figures: str) -> str:
    return f"{status:<4} {name:<18} {figures}"


def _model_cfg(device: str, *, lora: bool = True, parallel: str = "ddp"):
    from gagpo_cli.config import ModelConfig

    dtype = "auto" if device == "cuda" else "float32"  # a GPU: bf16 autocast, as training runs there
    return ModelConfig(name="tiny-random", lora=lora, lora_rank=4, lora_alpha=8, dtype=dtype, device=device,
                       parallel=parallel)


def _policy(device: str, **kw):
    from tiny_model import tiny_policy

    return tiny_policy(_model_cfg(device, **kw))


# ---------------------------------------------------------------------------- one-process checks


def check_devices(cpu: bool) -> tuple[str, str]:
    if cpu or not torch.cuda.is_available():
        return "SKIP", f"no GPU used (torch {torch.__version__}, cuda available: {torch.cuda.is_available()})"
    gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    names = ", ".join(f"{g.name} {g.total_memory / 2**30:.0f} GiB" for g in gpus)
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if dist.is_nccl_available() else "absent"
    versions = f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}"
    return "PASS", f"{len(gpus)} GPU(s): {names}; {versions}"


def check_bf16(device: str) -> tuple[str, str]:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 512, generator=g).to(device), torch.randn(512, 256, generator=g).to(device)
    exact = a.double() @ b.double()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        low = a @ b
        with torch.autocast(device_type=device, enabled=False):
            full = a.float() @ b.float()
    rel_bf16 = float((low.double() - exact).norm() / exact.norm())
    rel_fp32 = float((full.double() - exact).norm() / exact.norm())
    ok = low.dtype == torch.bfloat16 and full.dtype == torch.float32 and rel_bf16 < 1e-2 and rel_fp32 < 1e-4
    return ("PASS" if ok else "FAIL"), (f"on {device}: bf16 matmul rel. error {rel_bf16:.1e} (dtype "
                                        f"{low.dtype}), float32 outside autocast {rel_fp32:.1e}")


def _logprob_gap(policy, generations) -> float:
    """Max |log-prob the engine reported - the training forward's| over every sampled token."""
    rows = [(g.prompt_ids, g.response_ids) for g in generations if g.response_ids]
    with torch.no_grad():
        out = policy.forward(policy.collate(rows), temperature=1.0)
    gaps = []
    for i, g in enumerate(g for g in generations if g.response_ids):
        reported = torch.tensor(g.logprobs[:len(g.response_ids)], dtype=torch.float64)
        gaps.append((out.logprobs[i, :len(reported)].double().cpu() - reported).abs().max())
    return float(max(gaps))


def check_hf_rollout(device: str) -> tuple[str, str]:
    policy = _policy(device)
    began = time.perf_counter()
    generations = policy.generate(PROMPTS, temperature=1.0, max_new_tokens=16,
                                  generator=torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - began
    tokens = sum(len(g.response_ids) for g in generations)
    gap = _logprob_gap(policy, generations)
    tolerance = 5e-2 if policy.autocast_dtype is not None else 1e-4  # bf16 sampling vs float32 head
    return ("PASS" if gap < tolerance else "FAIL"), (f"on {device}: {tokens} tokens in {seconds:.2f} s, max "
                                                     f"|logp(generate) - logp(train forward)| {gap:.1e} "
                                                     f"(tolerance {tolerance:g})")


def check_vllm_rollout(device: str) -> tuple[str, str]:
    from gagpo_cli.train.acting.engines.vllm import VLLMEngine, vllm_problem

    problem = vllm_problem()
    if problem is not None:
        return "SKIP", f"vLLM not usable here ({problem})"
    if device != "cuda":
        return "SKIP", "vLLM check runs on a GPU"
    policy = _policy(device)
    with tempfile.TemporaryDirectory() as folder:
        policy.base_model.save_pretrained(folder)  # the tiny base (the adapter starts at zero)
        policy.tokenizer.save_pretrained(folder)
        engine = VLLMEngine(policy, Path(folder), options={"gpu_memory_utilization": 0.2})
        try:
            began = time.perf_counter()
            generations = engine.generate(PROMPTS, temperature=1.0, max_new_tokens=16,
                                          generator=torch.Generator().manual_seed(0))
            seconds = time.perf_counter() - began
        finally:
            engine.close()
    tokens = sum(len(g.response_ids) for g in generations)
    gap = _logprob_gap(policy, generations)
    return ("PASS" if gap < 5e-2 else "FAIL"), (f"{tokens} tokens in {seconds:.2f} s, max |logp(vLLM) - "
                                                f"logp(train forward)| {gap:.1e} (tolerance 0.05)")


# ---------------------------------------------------------------------------- multi-process checks


def _batch():
    from gagpo_cli.train.learning.generate_update import GenerateSample

    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(ROWS):
        prompt = torch.randint(3, 500, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
        response = torch.randint(3, 500, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
        rows.append(GenerateSample(prompt, response, advantage=float(torch.randn(1, generator=g))))
    return rows


def _update(case: str, device: str, rank: int, world: int) -> tuple[dict[str, torch.Tensor], float]:
    """One update of the tiny policy (``case``: ddp, fsdp-lora, fsdp-full): the trained weights after it,
    gathered, on the CPU, and the gradient norm before clipping (a sum of the ranks' gradients that
    were averaged instead would halve it; AdamW's step alone would not show that)."""
    from estimators import get_estimator
    from gagpo_cli.config import OptimConfig
    from gagpo_cli.train import sharding
    from gagpo_cli.train.distributed import Dist
    from gagpo_cli.train.learning.generate_update import GenerateUpdater

    ctx = Dist(rank, world)
    lora = case != "fsdp-full"
    policy = _policy(device, lora=lora, parallel="fsdp" if case.startswith("fsdp") else "ddp")
    policy.shard(ctx)
    optim = OptimConfig(lr=1e-2, kl_coef=0.05, entropy_coef=0.01, epochs=1, mini_batches=2, token_budget=60)
    updater = GenerateUpdater(policy, get_estimator("gagpo"), optim, dist=ctx)
    start, stop = ROWS * rank // world, ROWS * (rank + 1) // world
    metrics = updater.update(_batch(), own=slice(start, stop) if world > 1 else None)
    trained = {n for n, p in policy.model.named_parameters() if p.requires_grad}
    weights = sharding.full_state_dict(policy.model, ctx, every_rank=True, keys=trained.__contains__)
    return weights, metrics["actor/grad_norm"]


def _initial(case: str, device: str) -> dict[str, torch.Tensor]:
    """The trained parameters before any update (the policy is built from a fixed seed)."""
    policy = _policy(device, lora=case != "fsdp-full")
    return {n: p.detach().cpu().clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def _worker(rank: int, world: int, port: int, backend: str, out: str) -> None:
    torch.set_num_threads(1)
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank)
    os.environ.update({"WORLD_SIZE": str(world), "RANK": str(rank), "LOCAL_RANK": str(rank)})
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results: dict = {}
    try:
        results["collectives"] = _collectives(rank, world, device)
        for case in ("ddp", "fsdp-lora", "fsdp-full"):
            try:
                results[case] = _update(case, device, rank, world)
            except Exception:  # reported as this check's FAIL line
                results[case] = traceback.format_exc(limit=-3)
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


def _collectives(rank: int, world: int, device: str) -> dict[str, float]:
    t = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(t)
    gathered = [torch.zeros(2, device=device) for _ in range(world)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device=device))
    b = torch.full((3,), float(rank + 7), device=device)
    dist.broadcast(b, src=0)
    exact = (t.eq(world * (world + 1) / 2).all() and all(g.eq(r).all() for r, g in enumerate(gathered))
             and b.eq(7.0).all())
    big = torch.ones(16 * 2**20, device=device)  # 64 MiB of float32
    dist.all_reduce(big)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(3):
        dist.all_reduce(big)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - began) / 3
    return {"exact": float(bool(exact)), "gib_per_s": big.numel() * 4 / 2**30 / seconds}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def multi_process_checks(cpu: bool) -> list[tuple[str, str, str]]:
    gpus = 0 if cpu else torch.cuda.device_count()
    backend, device = ("nccl", "cuda") if gpus >= 2 else ("gloo", "cpu")
    where = f"2 processes, {backend}" + (" (one GPU each)" if backend == "nccl" else " on the CPU")
    if not cpu and gpus == 1:
        where += "; one GPU visible: NCCL needs 2"
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "results.pt")
        mp.spawn(_worker, args=(2, _free_port(), backend, out), nprocs=2, join=True)
        results = torch.load(out, weights_only=False)
    lines = []
    c = results["collectives"]
    lines.append(("PASS" if c["exact"] else "FAIL", "collectives",
                  f"{where}: all_reduce/all_gather/broadcast exact: {bool(c['exact'])}; all_reduce 64 MiB "
                  f"{c['gib_per_s']:.2f} GiB/s"))
    for case in ("ddp", "fsdp-lora", "fsdp-full"):
        got = results[case]
        name = {"ddp": "ddp-update", "fsdp-lora": "fsdp-update-lora", "fsdp-full": "fsdp-update-full"}[case]
        if isinstance(got, str):
            lines.append(("FAIL", name, f"{where}: " + " | ".join(got.strip().splitlines()[-2:])))
            continue
        status, figures = _compare(case, device, got)
        lines.append((status, name, f"{where}: {figures}"))
    return lines


def _compare(case: str, device: str, got: tuple[dict[str, torch.Tensor], float]) -> tuple[str, str]:
    """The processes' update against one process's update of the same batch on the same device."""
    weights, norm = got
    one, one_norm = _update(case, device, 0, 1)
    initial = _initial(case, device)
    moved = max(float((one[k].float() - initial[k].float()).abs().max()) for k in initial)
    diff = max(float((weights[k].float() - one[k].float()).abs().max()) for k in one)
    norm_gap = abs(norm - one_norm) / one_norm
    bf16 = device == "cuda"
    # AdamW divides each gradient element by its own scale: float summation order on a near-zero
    # gradient becomes a visible part of a learning-rate step, so weights get a share of the step.
    tolerance, norm_tolerance = (0.05, 2e-2) if bf16 else (1e-2, 1e-4)
    ok = (weights.keys() == one.keys() and moved > 0 and diff <= tolerance * moved
          and norm_gap <= norm_tolerance)
    return ("PASS" if ok else "FAIL"), (f"grad norm {norm:.6g} vs {one_norm:.6g} (rel. {norm_gap:.1e}); max "
                                        f"|w(processes) - w(one process)| {diff:.1e} of a {moved:.1e} step "
                                        f"(tolerances {norm_tolerance:g}, {tolerance:g} of the step)")


# ---------------------------------------------------------------------------- main


def run(cpu: bool, say: Callable[[str], None] = print) -> int:
    """Run every check, ``say`` one line each; returns the number of FAILs."""
    device = "cpu" if cpu or not torch.cuda.is_available() else "cuda"
    say(f"gpu check ({'CPU mode' if device == 'cpu' else 'GPU mode'}), tiny random model built in place")
    failures = 0
    one_process: list[tuple[str, Callable[[], tuple[str, str]]]] = [
        ("devices", lambda: check_devices(device == "cpu")),
        ("bf16-autocast", lambda: check_bf16(device)),
        ("hf-rollout", lambda: check_hf_rollout(device)),
        ("vllm-rollout", lambda: check_vllm_rollout(device)),
    ]
    for name, check in one_process:
        try:
            status, figures = check()
        except Exception as exc:  # one failing check must not hide the others
            status, figures = "FAIL", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        failures += status == "FAIL"
        say(_line(status, name, figures))
    try:
        lines = multi_process_checks(device == "cpu")
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        lines = [("FAIL", "multi-process", f"{type(exc).__name__}: {first}")]
    for status, name, figures in lines:
        failures += status == "FAIL"
        say(_line(status, name, figures))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="CPU mode: gloo, GPU-only checks SKIP")
    args = parser.parse_args(argv)
    return 1 if run(args.cpu) else 0


if __name__ == "__main__":
    sys.exit(main())

