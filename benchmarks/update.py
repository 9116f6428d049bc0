"""Policy-update throughput: the GenerateUpdater (length-sorted micro-batches, response-only output projection,
bf16 autocast) against a naive update (every row padded to the batch's longest row, fixed micro-batches
of ``--naive-rows`` rows, full-sequence logits, float32), in the same run on the same rows.

Rows mimic agent steps: prompts of 200-600 tokens, responses of 20-120 tokens (uniform). Both updates
do the same work: a reference pass (LoRA adapter disabled) and one gradient pass with the same loss
(``gagpo_cli.train.learning.loss.policy_loss``, sequence ratio, seq-mean-token-mean), then one AdamW step.
Throughput counts real (unpadded) tokens per second of update wall time; the two updates alternate
``--repeats`` times and the best time of each is kept. Target (issue): >= 2x.

    python benchmarks/update.py [--model smollm2-135m-instruct] [--rows 16] [--token-budget 4096]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F

from gagpo_cli.config import ModelConfig, OptimConfig
from gagpo_cli.train.learning.generate_update import GenerateSample, GenerateUpdater
from gagpo_cli.train.learning.loss import Denominators, policy_loss
from gagpo_cli.train.policies.lm import Policy


class DeclaredLoss:
    ratio_mode, loss_agg, needs_critic = "sequence", "seq-mean-token-mean", False


def make_rows(vocab: int, n: int, seed: int) -> list[GenerateSample]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        prompt = rng.integers(100, vocab, size=int(rng.integers(200, 601))).tolist()
        response = rng.integers(100, vocab, size=int(rng.integers(20, 121))).tolist()
        rows.append(GenerateSample(prompt, response, advantage=float(rng.normal())))
    return rows


def naive_logprobs(policy: Policy, rows: list[GenerateSample], width: int, with_entropy: bool):
    """Right-pad to ``width`` (the batch max), full logits over every position, gather the responses."""
    ids = torch.full((len(rows), width), policy.pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    resp_width = max(len(r.response_ids) for r in rows)
    positions = torch.zeros((len(rows), resp_width), dtype=torch.long)
    mask = torch.zeros((len(rows), resp_width))
    for i, r in enumerate(rows):
        seq = r.prompt_ids + r.response_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        positions[i] = (len(r.prompt_ids) - 1 + torch.arange(resp_width)).clamp(max=width - 2)
        mask[i, : len(r.response_ids)] = 1
    logits = policy.model(input_ids=ids, attention_mask=attention).logits.float()
    log_dist = F.log_softmax(logits, dim=-1)
    targets = ids.gather(1, positions + 1)
    per_pos = log_dist.gather(1, positions[..., None].expand(-1, -1, log_dist.shape[-1]))
    logp = per_pos.gather(-1, targets[..., None]).squeeze(-1) * mask
    entropy = -(per_pos.exp() * per_pos).sum(-1) * mask if with_entropy else None
    return logp, entropy, mask


def naive_update(policy: Policy, optimizer, rows: list[GenerateSample], cfg: OptimConfig, rows_per_batch: int) -> None:
    width = max(len(r.prompt_ids) + len(r.response_ids) for r in rows)
    chunks = [rows[i: i + rows_per_batch] for i in range(0, len(rows), rows_per_batch)]
    denom = Denominators(actions=len(rows), tokens=sum(len(r.response_ids) for r in rows))
    with torch.no_grad(), policy.model.disable_adapter():
        refs = [naive_logprobs(policy, chunk, width, False)[0] for chunk in chunks]
    for chunk, ref in zip(chunks, refs, strict=True):
        logp, entropy, mask = naive_logprobs(policy, chunk, width, True)
        adv = torch.tensor([r.advantage for r in chunk])
        shares = policy_loss(logp, logp.detach(), ref, entropy, adv, mask, ratio_mode="sequence",
                             loss_agg="seq-mean-token-mean", denom=denom, clip_low=cfg.clip_low,
                             clip_high=cfg.clip_high, dual_clip=cfg.dual_clip, kl_coef=cfg.kl_coef,
                             entropy_coef=cfg.entropy_coef)
        shares.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in policy.model.parameters() if p.requires_grad], cfg.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--naive-rows", type=int, default=4, help="rows per micro-batch in the naive update")
    parser.add_argument("--fast-dtype", default="auto", help="model.dtype of the fast update (auto = bf16 autocast)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = OptimConfig(token_budget=args.token_budget)
    naive = Policy.load(ModelConfig(name=args.model, dtype="float32"), seed=args.seed)
    fast = Policy.load(ModelConfig(name=args.model, dtype=args.fast_dtype), seed=args.seed)
    rows = make_rows(len(naive.tokenizer), args.rows, args.seed)
    real = sum(len(r.prompt_ids) + len(r.response_ids) for r in rows)
    width = max(len(r.prompt_ids) + len(r.response_ids) for r in rows)
    print(f"{args.rows} rows, {real} real tokens ({real / args.rows:.0f}/row), naive padding to {width} "
          f"-> {args.rows * width} tokens; device {naive.device}, {torch.get_num_threads()} threads; "
          f"best of {args.repeats}, interleaved", flush=True)

    optimizer = torch.optim.AdamW([p for p in naive.model.parameters() if p.requires_grad], lr=cfg.lr)
    updater = GenerateUpdater(fast, DeclaredLoss(), cfg)
    naive_times, fast_times = [], []
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits both alike
        start = time.perf_counter()
        naive_update(naive, optimizer, rows, cfg, args.naive_rows)
        naive_times.append(time.perf_counter() - start)
        metrics = updater.update(rows)
        fast_times.append(metrics["timing/update_s"])
        print(f"  naive {naive_times[-1]:6.1f} s   packed {fast_times[-1]:6.1f} s", flush=True)
    naive_s, fast_s = min(naive_times), min(fast_times)
    print(f"naive  (padded to batch max, {args.naive_rows} rows/micro-batch, full logits, fp32): "
          f"{naive_s:6.1f} s  {real / naive_s:6.0f} tok/s")
    print(f"packed (sorted micro-batches <= {args.token_budget} tokens, response-only head, "
          f"autocast {fast.autocast_dtype}): {fast_s:6.1f} s  {real / fast_s:6.0f} tok/s   "
          f"padding {metrics['perf/padding_frac']:.1%}, {metrics['perf/micro_batches']:.0f} micro-batches")
    print(f"speed-up: {naive_s / fast_s:.2f}x (target >= 2x); peak RSS {peak_rss_gb():.1f} GB")


if __name__ == "__main__":
    main()
