"""Bad files and paths given to ``export``, ``eval``, ``report`` and ``train``: a weight file that is a
git-lfs pointer or damaged behind a matching manifest, output paths that are files, folders, empty or
below a file, a run directory's file given as the run, a report whose only run is skipped, and the
caps of ``gagpo eval``.

Each case runs the real command line in a prepared folder and asserts: exit code 2, one line on stderr
naming the problem, no traceback, and the folder byte-for-byte as before. The prepared folder holds a
tiny model, a finished one-iteration LoRA run of it on the corridor, a copy of that run whose adapter
weights are damaged with its manifest re-hashed to match, a model folder whose weights are a git-lfs
pointer, and report-ready runs written by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from envs import plugin_on_sys_path
from report_runs import write_run
from support import assert_one_error_line, file_tree, run_cli
from tiny_model import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.integration  # trains a run and runs commands end to end

RUN_SETS = ["--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "env.max_steps=2",
            "--set", "rollout.max_new_tokens=4", "--set", "train.eval_episodes=0", "--set", "model.dtype=float32",
            "--set", "model.lora_rank=4"]
RUN = ["--model", "tiny-model", "--env", "corridor", "--iterations", "1", "--output-dir", "runs", "--run-name", "done",
       *RUN_SETS]
LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\n"
               "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 560488\n")


def _damage_behind_the_manifest(checkpoint: Path, rel: str) -> None:
    """Overwrite the safetensors header length of ``checkpoint/rel`` with a huge one and re-hash it into the
    manifest: the file no longer parses, but the checkpoint verifies (damaged before it was saved)."""
    weights = checkpoint / rel
    data = bytearray(weights.read_bytes())
    data[:8] = (10**12).to_bytes(8, "little")
    weights.write_bytes(bytes(data))
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["files"][rel] = hashlib.sha256(bytes(data)).hexdigest()
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The prepared folder (see the module docstring), the working directory, with the corridor importable."""
    root = tmp_path_factory.mktemp("bad-paths")
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(root / "tiny-model")
    tokenizer.save_pretrained(root / "tiny-model")
    shutil.copytree(root / "tiny-model", root / "lfs-model")
    (root / "lfs-model" / "model.safetensors").write_text(LFS_POINTER)
    (root / "a-file").write_text("not a folder\n")
    (root / "empty").mkdir()
    write_run(root / "finished" / "grpo", "grpo", "alfworld", 40.0, 40.0)
    write_run(root / "skipped" / "grpo", "grpo", "alfworld", 40.0, 40.0)
    (root / "skipped" / "grpo" / "eval.json").write_text('{"success_rate": ')
    old = Path.cwd()
    os.chdir(root)
    try:
        with plugin_on_sys_path(root / "plugin"):
            code, _, err = run_cli(["train", *RUN])
            assert code == 0, err
            damaged = shutil.copytree(root / "runs" / "done", root / "runs" / "bad-weights")
            _damage_behind_the_manifest(damaged / "checkpoints" / "iter_000001", "policy/adapter_model.safetensors")
            yield root
    finally:
        os.chdir(old)



EVAL = ["eval", "--env", "corridor", "--episodes", "1"]
CASES = [
    # weights: a clone without git-lfs, and damaged weights whose checkpoint manifest matches
    ("train-model-lfs-pointer", ["train", "--env", "corridor", "--model", "lfs-model", "--output-dir", "runs2",
                                 *RUN_SETS], ["git-lfs pointer", "git lfs pull", "lfs-model"]),
    ("eval-model-lfs-pointer", [*EVAL, "--policy", "lfs-model"], ["git-lfs pointer", "git lfs pull"]),
    ("eval-damaged-weights", [*EVAL, "--policy", "runs/bad-weights"],
     ["damaged weights", "adapter_model.safetensors", "another checkpoint"]),
    ("export-damaged-weights", ["export", "runs/bad-weights", "--out", "exported"],
     ["damaged weights", "adapter_model.safetensors"]),
    # export: the output folder and the run
    ("export-out-empty-string", ["export", "runs/done", "--out", ""], ["--out is empty"]),
    ("export-out-a-file", ["export", "runs/done", "--out", "a-file"], ["--out a-file is a file"]),
    ("export-out-below-a-file", ["export", "runs/done", "--out", "a-file/model"], ["a-file is a file"]),
    ("export-run-config-file", ["export", "runs/done/config.yaml", "--out", "exported"],
     ["config.yaml is a file", "training run directory"]),
    # eval: the JSON file, the caps, the action mode
    ("eval-json-a-folder", [*EVAL, "--json", "empty"], ["--json empty is a folder", "empty/eval.json"]),
    ("eval-json-trailing-slash", [*EVAL, "--json", "new-folder/"], ["ends with '/'", "new-folder/eval.json"]),
    ("eval-json-below-a-file", [*EVAL, "--json", "a-file/out.json"], ["a-file is a file"]),
    ("eval-json-empty-string", [*EVAL, "--json", ""], ["--json is empty"]),
    ("eval-json-unwritable", [*EVAL, "--json", "/proc/gagpo-eval.json"], ["/proc/gagpo-eval.json"]),
    ("eval-policy-config-file", [*EVAL, "--policy", "runs/done/config.yaml"],
     ["config.yaml is a file", "training run directory"]),
    ("eval-policy-checkpoints-folder", [*EVAL, "--policy", "runs/done/checkpoints"],
     ["checkpoints folder", "give the run directory runs/done"]),
    ("eval-engine-unknown", [*EVAL, "--policy", "tiny-model", "--engine", "vlm"], ["--engine 'vlm'", "hf, vllm"]),
    ("eval-max-steps-zero", [*EVAL, "--max-steps", "0"], ["--max-steps must be at least 1"]),
    ("eval-max-new-tokens-zero", [*EVAL, "--policy", "tiny-model", "--max-new-tokens", "0"],
     ["--max-new-tokens must be at least 1"]),
    ("eval-max-new-tokens-builtin", [*EVAL, "--max-new-tokens", "8"], ["'expert' is not one"]),
    ("eval-action-mode-unknown", [*EVAL, "--policy", "tiny-model", "--action-mode", "rank"],
     ["--action-mode 'rank'", "generate, score"]),
    ("eval-action-mode-of-a-run", [*EVAL, "--policy", "runs/done", "--action-mode", "score"],
     ["trained in generate mode", "model folder"]),
    # report: the output folder, a report whose only run is skipped
    ("report-out-a-file", ["report", "finished", "--out", "a-file"], ["--out a-file is a file"]),
    ("report-empty-run-name", ["report", "finished", ""], ["empty run directory name"]),
    ("report-a-config-file", ["report", "runs/done/config.yaml"], ["config.yaml is a file", "run directories"]),
    ("export-empty-run-name", ["export", "", "--out", "exported"], ["run directory is empty"]),
    ("eval-policy-empty", [*EVAL, "--policy", ""], ["--policy is empty"]),
    ("report-out-unwritable", ["report", "finished", "--out", "/proc/gagpo-report"], ["/proc/gagpo-report"]),
    ("export-out-unwritable", ["export", "runs/done", "--out", "/proc/gagpo-model"], ["/proc/gagpo-model"]),
    ("report-out-empty-string", ["report", "finished", "--out", ""], ["--out is empty"]),
    ("report-only-run-skipped", ["report", "skipped", "--out", "report"],
     ["every run was skipped", "corrupt eval.json"]),
]


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_paths_are_one_line_exit_2_and_leave_nothing_behind(world, args, words):
    before = file_tree(world)
    code, out, err = run_cli(args)
    assert_one_error_line(code, out, err, words)
    assert file_tree(world) == before  # nothing created, changed or half-written


def test_a_torn_metrics_line_is_skipped_with_a_warning_and_the_figures_are_written(world, tmp_path):
    run = write_run(tmp_path / "runs" / "grpo", "grpo", "alfworld", 40.0, 40.0, curve=[10.0, 20.0, 30.0])
    with open(run / "metrics.jsonl", "ab") as fh:  # a write torn inside a multi-byte character
        fh.write(b'{"iteration": 4, "train/success_rate": 4' + "é".encode()[:1])
    code, out, err = run_cli(["report", str(tmp_path / "runs"), "--figures", "--out", str(tmp_path / "report")])
    assert code == 0, err
    assert err.strip().splitlines() == [f"warning: {run / 'metrics.jsonl'}:4: damaged line (not UTF-8, a torn "
                                        "write) skipped"]
    assert (tmp_path / "report" / "figures" / "alfworld_Qwen2.5-1.5B-Instruct_train_success_rate.png").is_file()
    assert not [p for p in (tmp_path / "report").rglob(".*")]  # no temporary folder left


def test_eval_caps_steps_and_says_so(world, tmp_path):
    code, out, err = run_cli([*EVAL, "--max-steps", "1", "--json", str(tmp_path / "e.json")])
    assert code == 0, err
    result = json.loads((tmp_path / "e.json").read_text())
    assert result["max_steps"] == 1 and [e["length"] for e in result["per_episode"]] == [1]


def test_a_corrupt_evaluation_record_is_named_and_left_out_of_the_curve(world, tmp_path):
    run = write_run(tmp_path / "runs" / "grpo", "grpo", "alfworld", 40.0, 40.0)
    (run / "evals").mkdir()
    for iteration, success in ((0, 10.0), (1, 20.0), (2, 30.0)):
        (run / "evals" / f"iter_{iteration:06d}.json").write_text(json.dumps(
            {"iteration": iteration, "success_rate": success, "score": success, "per_type": {}}))
    (run / "evals" / "iter_000003.json").write_bytes(b'{"iteration": 3, "success_rate": \xff')
    code, out, err = run_cli(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")])
    assert code == 0, err
    assert err.strip().splitlines() == [f"warning: {run / 'evals' / 'iter_000003.json'}: corrupt eval.json "
                                        "(UnicodeDecodeError); left out of the evaluation curve"]
    auc = (tmp_path / "report" / "results_auc.md").read_text()
    # the normalised trapezoid over iterations 0-2 (10, 20, 30); the corrupt iteration 3 is not on the grid
    assert "| GRPO | 20.0 |" in auc and "iterations 0-2 every 1 (3 evaluations)" in auc
