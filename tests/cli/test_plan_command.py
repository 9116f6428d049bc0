"""``gagpo plan``: one row per GPU count with the memory plan's parts, whether it fits, and the settings
that would; bad input is one line and exit 2 (tests/cli/test_bad_input.py has the campaign's cases)."""

from __future__ import annotations

import pytest
from support import run_cli

from gagpo_cli.errors import UsageError
from gagpo_cli.plan import parse_gpus, plan_table
from gagpo_cli.train.memory_plan import GIB, SHAPES, PlanSettings, plan

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
    expected = plan(SHAPES[SEVEN_B], PlanSettings(processes=8, parallel="fsdp", lora=False))
    figures = [float(x) for x in rows[8][1:9]]
    assert figures == pytest.approx([round(v / GIB, 1) for v in (*expected.parts().values(), expected.exact,
                                                                 expected.total)], abs=0.051)
    assert rows[1][-1] == "no" and rows[8][-1] == ("yes" if expected.total <= 80 * GIB else "exact")
    advice = lines[lines.index("settings that would fit:") + 1:]
    assert advice[0].startswith("  1 GPU(s): model.parallel=fsdp on 2 processes")
    assert advice[-2].startswith("  8 GPU(s): model.activation_checkpointing=true (")
    two = next(line for line in advice if line.startswith("  2 GPU(s): "))
    assert "optim.token_budget=" in two  # checkpointing alone does not fit 2 GPUs: a smaller micro-batch


def test_ddp_replicates_so_more_gpus_do_not_help():
    rows = _rows(plan_table("alfworld-gagpo", [f"model.name={SEVEN_B}", "model.lora=false"], [1, 8], 80.0))
    assert rows[1][1:9] == rows[8][1:9] and rows[8][-1] == "no"


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
