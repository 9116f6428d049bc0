"""FSDP2 sharding (gagpo_cli/train/sharding.py) on 2 gloo processes equals one process: the summed-loss
update (AdamW, gradient clipping) of full fine-tuning (tied embeddings too) and LoRA (also bf16 mixed
precision), with
unequal micro-batch counts padded by idle passes; a sharded checkpoint resumes the next step exactly on
2 ranks, and loads across rank counts (2 -> 1, 1 -> 2); the gathered weights equal the one-process
weights; greedy generation in lock-step with unequal lengths (one rank with nothing to generate)."""

from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from gagpo_cli.train import sharding
from gagpo_cli.train.distributed import Dist

pytest.importorskip("transformers")

VOCAB = 64
ROWS = [(3 + i % 3, 2 + i % 4) for i in range(6)]  # (prompt length, response length) of each row
RANK_MICRO_BATCHES = [[[0, 1], [2], [3]], [[4, 5]]]  # rank 0 runs 3 micro-batches, rank 1 one
LR, MAX_NORM, STEPS = 0.01, 0.02, 2
# The models trained on 2 ranks against one process: full fine-tuning (untied, as the 7B models), LoRA
# (with activation checkpointing), full fine-tuning of a model whose output projection is its embedding.
CASES = {"full": {}, "lora": {"lora": True}, "tied": {"tied": True}}
CHECKPOINTING = {"lora"}


def _model(lora: bool = False, bf16_base: bool = False, tied: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=tied)
    model = LlamaForCausalLM(config)
    if bf16_base:  # a GPU's LoRA layout: bf16 base, float32 adapters (peft's default)
        model = model.to(torch.bfloat16)
    if lora:
        from peft import LoraConfig, get_peft_model

        for p in model.parameters():
            p.requires_grad_(False)
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
            model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                     lora_dropout=0.0, task_type="CAUSAL_LM"))
    return model.train()


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token rows (prompt + response, right-padded), response masks and per-row weights (advantages)."""
    gen = torch.Generator().manual_seed(1)
    width = max(p + r for p, r in ROWS)
    ids = torch.randint(1, VOCAB, (len(ROWS), width), generator=gen)
    response = torch.zeros(len(ROWS), width)
    for i, (p, r) in enumerate(ROWS):
        response[i, p:p + r] = 1.0
    weights = torch.randn(len(ROWS), generator=gen)
    return ids, response, weights


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    """The policy's pattern: the decoder and the float32 output projection called directly, inside
    ``root_call``."""
    lm = sharding.causal_lm(model)

    def logits_of(input_ids):
        hidden = lm.get_decoder()(input_ids=input_ids, use_cache=False).last_hidden_state
        return F.linear(hidden[:, :-1].float(), lm.get_output_embeddings().weight.float())

    return sharding.root_call(model, logits_of, ids)


def _loss_share(model, rows: list[int], total_tokens: float) -> torch.Tensor:
    """A weighted log-prob sum over these rows divided by the WHOLE batch's token count."""
    ids, response, weights = _batch()
    ids, response, weights = ids[rows], response[rows], weights[rows]
    logprobs = F.log_softmax(_logits(model, ids), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -(logprobs * response[:, 1:] * weights[:, None]).sum() / total_tokens


def _step(model, optimizer, micro_batches: list[list[int]], ctx: Dist) -> float:
    """One update: every rank runs the agreed number of micro-batches (idle passes for the missing
    ones), then clipping and AdamW on the (sharded) trainable parameters; returns the gradient norm
    before clipping."""
    total_tokens = float(_batch()[1][:, 1:].sum())
    optimizer.zero_grad()
    for i in range(sharding.agreed_count(len(micro_batches), ctx)):
        if i < len(micro_batches):
            _loss_share(model, micro_batches[i], total_tokens).backward()
        else:
            sharding.idle_pass(model, backward=True)
    norm = sharding.clip_grad_norm([p for p in model.parameters() if p.requires_grad], MAX_NORM)
    optimizer.step()
    return norm


def _grads(model) -> dict[str, torch.Tensor]:
    """The full (clipped) gradients of the trainable parameters, by name."""
    return {name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
            for name, p in model.named_parameters() if p.requires_grad}


def _optimizer(model) -> torch.optim.Optimizer:
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=0.1)


def _train(model, micro_batches: list[list[int]], ctx: Dist, *, bf16_autocast: bool = False,
           save_to: Path | None = None) -> dict[str, list]:
    """``STEPS`` updates: the gradient norm, the clipped gradients and the full weights (on rank 0)
    after each; with ``save_to``, a sharded checkpoint after the first."""
    optimizer = _optimizer(model)
    run: dict[str, list] = {"norms": [], "grads": [], "weights": []}
    for step in range(STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16_autocast):
            run["norms"].append(_step(model, optimizer, micro_batches, ctx))
        run["grads"].append(_grads(model))
        run["weights"].append(sharding.full_state_dict(model, ctx))
        if step == 0 and save_to is not None:
            sharding.save_sharded(save_to, model, optimizer, ctx)
    return run


def _one_process(model, bf16_autocast: bool = False) -> dict[str, list]:
    """The reference: one process, the whole batch in one micro-batch."""
    return _train(model, [list(range(len(ROWS)))], Dist(), bf16_autocast=bf16_autocast)


def _greedy(model, prompt: list[int], new_tokens: int, ctx: Dist, steps: int) -> list[int]:
    """Greedy decoding of ``new_tokens`` tokens, in lock-step: ``steps`` is how long this rank keeps
    forwarding (its own tokens, then idle passes while another rank still generates)."""
    ids = torch.tensor([prompt])
    step = 0
    with torch.no_grad():
        while sharding.any_busy(step < new_tokens, ctx):
            if step < new_tokens:
                logits = model(input_ids=ids, use_cache=False).logits
                ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            else:
                sharding.idle_pass(model, backward=False)
            step += 1
    steps.append(step)
    return ids[0, len(prompt):].tolist()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    ctx = Dist(rank=rank, world_size=2)
    result: dict[str, object] = {}
    for case, kind in CASES.items():
        checkpointing = case in CHECKPOINTING
        model = sharding.shard_model(_model(**kind), ctx, activation_checkpointing=checkpointing)
        result[case] = _train(model, RANK_MICRO_BATCHES[rank], ctx, save_to=Path(out) / f"ckpt-{case}")
        # Resume: a fresh sharded model and optimizer loaded from the step-1 checkpoint take step 2.
        fresh = sharding.shard_model(_model(**kind), ctx, activation_checkpointing=checkpointing)
        fresh_optimizer = _optimizer(fresh)
        sharding.load_sharded(Path(out) / f"ckpt-{case}", fresh, fresh_optimizer)
        _step(fresh, fresh_optimizer, RANK_MICRO_BATCHES[rank], ctx)
        result[f"{case}-resumed"] = sharding.full_state_dict(fresh, ctx, every_rank=True)
        adapters = sharding.full_state_dict(fresh, ctx, keys=lambda k: "lora_" in k)
        result[f"{case}-adapter-keys"] = sorted(adapters)
    # A checkpoint written by one process (before the spawn) resumes on 2 ranks.
    model = sharding.shard_model(_model(), ctx)
    optimizer = _optimizer(model)
    sharding.load_sharded(Path(out) / "ckpt-one-process", model, optimizer)
    _step(model, optimizer, RANK_MICRO_BATCHES[rank], ctx)
    result["resumed-from-one-process"] = sharding.full_state_dict(model, ctx)
    # A GPU's layouts under bf16 autocast (float32 weights; LoRA: bf16 base, float32 adapters):
    # decoder layers gathered in bf16, reduced in float32.
    for case, lora in (("full-bf16", False), ("lora-bf16", True)):
        model = sharding.shard_model(_model(lora, bf16_base=lora), ctx, mixed_precision=True)
        result[case] = _train(model, RANK_MICRO_BATCHES[rank], ctx, bf16_autocast=True)
    # A frozen reference copy (full fine-tuning's KL anchor), sharded too: forwards without gradients.
    reference = _model().eval().requires_grad_(False)
    reference = sharding.shard_model(reference, ctx)
    with torch.no_grad():
        result["reference-logits"] = _logits(reference, _batch()[0][[rank, rank + 2]])
    model = sharding.shard_model(_model(), ctx)
    model.eval()
    steps: list[int] = []
    result["greedy"] = _greedy(model, [5, 9, 2], 3 + 2 * rank, ctx, steps)
    result["greedy-steps"] = steps
    result["greedy-none"] = _greedy(model, [5, 9, 2], 0 if rank == 0 else 2, ctx, steps)
    dist.destroy_process_group()
    torch.save(result, f"{out}/rank{rank}.pt")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Every case run by 2 gloo processes (one spawn for all, to pay the start-up once)."""
    out = tmp_path_factory.mktemp("sharding")
    model = _model()
    optimizer = _optimizer(model)
    _step(model, optimizer, [list(range(len(ROWS)))], Dist())
    sharding.save_sharded(out / "ckpt-one-process", model, optimizer, Dist())
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=2, join=True)
    return out, [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def _assert_weights_equal(got: dict, want: dict, exact: bool = False, atol: float = 1e-6) -> None:
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        if exact:
            assert torch.equal(got[key], value), key
        else:
            torch.testing.assert_close(got[key], value, rtol=1e-5, atol=atol, msg=key)


# AdamW divides each gradient element by its own running scale, so an element whose gradient is at
# float-rounding size moves by up to a learning rate on summation-order noise: the weights agree to a
# thousandth of a step, the gradients (and their norm, which a mean instead of a sum would halve) to
# float precision.
ADAM_ATOL = LR * 1e-3


@pytest.mark.parametrize("case", list(CASES))
def test_sharded_update_equals_the_one_process_update(two_ranks, case):
    _, (rank0, rank1) = two_ranks
    want = _one_process(_model(**CASES[case]))
    assert rank1[case]["weights"] == [{}, {}]  # full weights are gathered on rank 0 only by default
    for rank in (rank0, rank1):
        torch.testing.assert_close(rank[case]["norms"], want["norms"], rtol=1e-5, atol=0)
        for got, expected in zip(rank[case]["grads"], want["grads"], strict=True):
            _assert_weights_equal(got, expected, atol=1e-8)
    assert min(want["norms"]) > MAX_NORM  # clipping was active
    for got, expected in zip(rank0[case]["weights"], want["weights"], strict=True):
        _assert_weights_equal(got, expected, atol=ADAM_ATOL)
    start = _model(**CASES[case]).state_dict()
    moved = [k for k in start if not torch.equal(start[k], want["weights"][-1][k])]
    assert moved and (case != "lora" or all("lora_" in k for k in moved))  # the update did something


@pytest.mark.parametrize("case", ["full", "lora"])
def test_mixed_precision_update_is_the_one_process_update_under_autocast(two_ranks, case):
    """Under bf16 autocast, layers gathered in bf16 and reduced in float32: the first step's gradients
    match the one-process gradients to bf16 precision, the norms to 1% (a mean instead of a sum would
    halve them); the second step's gradients read weights that AdamW moved by bf16 noise."""
    _, (rank0, rank1) = two_ranks
    lora = case == "lora"
    want = _one_process(_model(lora, bf16_base=lora), bf16_autocast=True)
    for rank in (rank0, rank1):
        got = rank[f"{case}-bf16"]
        torch.testing.assert_close(got["norms"], want["norms"], rtol=1e-2, atol=0)
        for key, value in want["grads"][0].items():
            assert got["grads"][0][key].dtype == torch.float32
            torch.testing.assert_close(got["grads"][0][key], value, rtol=0,
                                       atol=0.02 * float(value.abs().max()) + 1e-9, msg=key)


def test_lora_adapters_are_selected_by_key(two_ranks):
    _, (rank0, rank1) = two_ranks
    keys = rank0["lora-adapter-keys"]
    assert keys and all("lora_" in k for k in keys) and rank1["lora-adapter-keys"] == []
    assert rank0["full-adapter-keys"] == []


@pytest.mark.parametrize("case", list(CASES))
def test_sharded_checkpoint_resumes_the_next_step_exactly(two_ranks, case):
    out, (rank0, rank1) = two_ranks
    _assert_weights_equal(rank0[f"{case}-resumed"], rank0[case]["weights"][1], exact=True)
    _assert_weights_equal(rank1[f"{case}-resumed"], rank0[case]["weights"][1], exact=True)
    assert not any(p.name.startswith(".tmp-") for p in out.iterdir())  # renamed into place


@pytest.mark.parametrize("case", list(CASES))
def test_a_two_rank_checkpoint_loads_in_one_process(two_ranks, case):
    out, (rank0, _) = two_ranks
    model = _model(**CASES[case])
    optimizer = _optimizer(model)
    sharding.load_sharded(out / f"ckpt-{case}", model, optimizer)
    _assert_weights_equal(model.state_dict(), rank0[case]["weights"][0], exact=True)
    _step(model, optimizer, [list(range(len(ROWS)))], Dist())
    _assert_weights_equal(model.state_dict(), rank0[case]["weights"][1], atol=ADAM_ATOL)


def test_a_one_process_checkpoint_resumes_on_two_ranks(two_ranks):
    _, (rank0, _) = two_ranks
    want = _one_process(_model())["weights"][1]
    _assert_weights_equal(rank0["resumed-from-one-process"], want, atol=ADAM_ATOL)


def test_generation_runs_in_lock_step_until_every_rank_is_done(two_ranks):
    _, (rank0, rank1) = two_ranks
    model = _model().eval()
    steps: list[int] = []
    want = _greedy(model, [5, 9, 2], 5, Dist(), steps)
    assert rank0["greedy"] == want[:3] and rank1["greedy"] == want
    assert rank0["greedy-steps"] == rank1["greedy-steps"] == [5, 2]  # rank 0 idled for 2 steps, then 2
    assert rank0["greedy-none"] == [] and rank1["greedy-none"] == want[:2]


def test_a_frozen_sharded_reference_gives_the_one_process_logits(two_ranks):
    _, ranks = two_ranks
    model = _model().eval()
    for rank, result in enumerate(ranks):
        with torch.no_grad():
            want = _logits(model, _batch()[0][[rank, rank + 2]])
        torch.testing.assert_close(result["reference-logits"], want, rtol=1e-5, atol=1e-6)


def test_a_lora_checkpoint_holds_only_the_adapters_and_fits_only_its_model(two_ranks):
    import torch.distributed.checkpoint as dcp

    out, _ = two_ranks
    stored = dcp.FileSystemReader(str(out / "ckpt-lora")).read_metadata().state_dict_metadata
    weights = [k for k in stored if k.startswith("model.")]
    assert weights and all("lora_" in k for k in weights)  # the frozen base comes from the model source
    with pytest.raises(ValueError, match="does not hold this model's model.embed_tokens.weight"):
        sharding.load_sharded(out / "ckpt-lora", _model(), None)


def test_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no sharded checkpoint at"):
        sharding.load_sharded(tmp_path / "nothing", _model(), None)


def test_offload_needs_a_gpu_policy():
    with pytest.raises(ValueError, match="offload_optimizer"):
        sharding.shard_model(_model(), Dist(rank=0, world_size=2), offload_optimizer=True)
