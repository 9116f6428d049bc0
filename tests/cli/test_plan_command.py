"""``gagpo plan``: one row per GPU count with the memory plan's parts, whether it fits, and the settings
that would; bad input is one line and exit 2 (tests/cli/test_bad_input.py has the campaign's cases)."""

from __future__ import annotations

import pytest
from support import run_cli

from gagpo_cli.errors import UsageError
from gagpo_cli.plan import parse_gpus, plan_table
from gagpo_cli.train.memory_plan import GIB, SHAPES, PlanSettings, check, plan

SEVEN_B = "Qwen/Qwen2.5-7B-Instruct"


def _rows(lines: list[str]) -> dict[int, list[str]]:
    """The table's rows by GPU count (the advice lines under it name their count as "N GPU(s):")."""
    return {int(line.split()[0]): line.split() for line in lines
            if line.split()[0].isdigit() and line.split()[1] != "GPU(s):"}


def test_one_row_per_gpu_count_with_the_plans_figures():
    lines = plan_table("alfworld-gagpo", [f"model.name={SEVEN_B}", "model.lora=false", "model.parallel=fsdp"],
                       [1, 2, 8], 80.0)
    rows = _rows(lines)
    assert sorted(rows) == [1, 2, 8]
    expected = plan(SHAPES[SEVEN_B], PlanSettings(processes=8, parallel="fsdp", lora=False, prompt_tokens=1024,
                                                  rollout_rows=16 * 8, response_tokens=512, engine="auto"))
    figures = [float(x) for x in rows[8][1:12]]
    assert figures == pytest.approx([round(v / GIB, 1) for v in (*expected.parts().values(), expected.exact,
                                                                 expected.total)], abs=0.051)
    assert rows[1][-1] == "no" and rows[8][-1] == ("yes" if expected.total <= 80 * GIB else "exact")
    advice = lines[lines.index("settings that would fit:") + 1:]
    assert advice[0].startswith("  1 GPU(s): model.parallel=fsdp on 2 processes")
    assert advice[-2].startswith("  8 GPU(s): model.activation_checkpointing=true (")
    two = next(line for line in advice if line.startswith("  2 GPU(s): "))
    # on 2 GPUs the hf rollout of 128 rows (KV cache, prompt pass, the gathered model) is the peak
    assert "the rollout does not fit" in two and "rollout.tasks_per_batch" in two


def test_ddp_replicates_so_more_gpus_do_not_help():
    rows = _rows(plan_table("alfworld-gagpo", [f"model.name={SEVEN_B}", "model.lora=false"], [1, 8], 80.0))
    assert rows[1][1:12] == rows[8][1:12] and rows[8][-1] == "no"


def test_bad_gpu_counts_are_refused():
    assert parse_gpus("1, 2,4") == [1, 2, 4]
    for text in ("", "0,2", "two"):
        with pytest.raises(UsageError, match="--gpus"):
            parse_gpus(text)


def test_the_command_prints_the_table_and_a_bad_input_exits_2_with_one_line():
    code, out, err = run_cli(["plan", "alfworld-gagpo", "--model", SEVEN_B, "--full", "--gpus", "1,2",
                              "--gpu-gib", "80", "--parallel", "fsdp"])
    assert code == 0, err
    assert "full fine-tuning, model.parallel fsdp" in out
    assert sorted(_rows(out.splitlines())) == [1, 2]
    code, _, err = run_cli(["plan", "alfworld-gagpo", "--gpu-gib", "-3"])
    assert code == 2 and err.strip().count("\n") == 0 and "--gpu-gib" in err


def test_the_plan_prints_the_rollout_and_a_vllm_engines_share_and_the_refusal_counts_it():
    one_5b = ["model.name=Qwen/Qwen2.5-1.5B-Instruct", "model.lora=false"]
    hf = plan_table("alfworld-gagpo", [*one_5b, "rollout.engine=hf"], [1], 80.0, prompt_tokens=2048)
    vllm = plan_table("alfworld-gagpo", [*one_5b, "rollout.engine=vllm",
                                         "rollout.engine_options.gpu_memory_utilization=0.5"], [1], 80.0)
    header = ["gpus", *hf[1].split()[1:]]
    assert "rollout" in header and "vllm" in header and "128 rows of 2048 prompt + 512 new tokens" in hf[0]
    hf_row, vllm_row = _rows(hf)[1], _rows(vllm)[1]
    assert float(hf_row[header.index("rollout")]) > 10 and float(hf_row[header.index("vllm")]) == 0
    assert float(vllm_row[header.index("vllm")]) == pytest.approx(40.0)  # half of the 80 GiB
    assert float(vllm_row[header.index("rollout")]) == 0  # vLLM generates inside its share
    shape = SHAPES["Qwen/Qwen2.5-1.5B-Instruct"]
    check(shape, PlanSettings(lora=False), 60 * GIB, "1.5B")  # fits without an engine
    with pytest.raises(UsageError, match=r"vLLM's 0.8 share \(48.0 GiB\)"):
        check(shape, PlanSettings(lora=False, engine="vllm", engine_share=0.8), 60 * GIB, "1.5B")
