"""Bad settings: one settings check for ``train``, ``plan`` and ``ablate --dry-run``,
``--run-name`` as a name, ``plan --gpu-gib``, an empty experiment file, and the options a command ignores
printed as one ``warning:`` line.

Each refusal runs the real command line in-process (``support.run_cli``) in an empty folder holding two
experiment files, and asserts: exit code 2, exactly one ``error:`` line on stderr with the expected words,
and the folder unchanged (no run directory, no sweep folder). Every case fails before a model is loaded.
"""

from __future__ import annotations

import pytest
from support import assert_one_error_line, run_cli

from gagpo_cli.config import load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.config_checks import check_settings

LAB = ["lab-alfworld", "--iterations", "1"]  # the bow-mlp lab experiment: no model download
LONG_NAME = "r" * 300

# (id, command line, words the one error line must contain)
CASES = [
    # item 3: optimiser settings reached torch's AdamW and came out as tracebacks
    ("train-negative-lr", ["train", *LAB, "--set", "optim.lr=-0.02"], ["optim.lr", "> 0", "-0.02"]),
    ("train-nan-lr", ["train", *LAB, "--set", "optim.lr=nan"], ["optim.lr", "finite"]),
    ("train-inf-lr", ["train", *LAB, "--set", "optim.lr=.inf"], ["optim.lr", "finite"]),
    ("train-negative-weight-decay", ["train", *LAB, "--set", "optim.weight_decay=-1"], ["optim.weight_decay", ">= 0"]),
    ("train-zero-critic-lr", ["train", *LAB, "--set", "optim.critic_lr=0"], ["optim.critic_lr", "> 0"]),
    # item 10: the clip range
    ("train-negative-clip-low", ["train", *LAB, "--set", "optim.clip_low=-0.2"], ["optim.clip_low", "[0, 1)"]),
    ("train-clip-low-one", ["train", *LAB, "--set", "optim.clip_low=1"], ["optim.clip_low", "[0, 1)"]),
    ("train-zero-clip-high", ["train", *LAB, "--set", "optim.clip_high=0"], ["optim.clip_high", "> 0"]),
    ("train-dual-clip-below-one", ["train", *LAB, "--set", "optim.dual_clip=0.5"], ["optim.dual_clip", "> 1"]),
    ("train-negative-grad-clip", ["train", *LAB, "--set", "optim.grad_clip=-1"], ["optim.grad_clip", "> 0"]),
    ("train-negative-kl", ["train", *LAB, "--set", "optim.kl_coef=-0.01"], ["optim.kl_coef", ">= 0"]),
    ("train-nan-temperature", ["train", *LAB, "--set", "rollout.temperature=.nan"], ["rollout.temperature", "> 0"]),
    ("train-nan-eval-temperature", ["train", *LAB, "--set", "rollout.eval_temperature=.nan"],
     ["rollout.eval_temperature", "finite"]),
    ("train-zero-success-reward", ["train", *LAB, "--set", "rollout.success_reward=0"], ["rollout.success_reward"]),
    ("train-negative-invalid-penalty", ["train", *LAB, "--set", "rollout.invalid_penalty=-1"],
     ["rollout.invalid_penalty", ">= 0"]),
    ("train-zero-lora-rank", ["train", *LAB, "--set", "model.lora_rank=0"], ["model.lora_rank must be at least 1"]),
    ("train-lora-dropout-one", ["train", *LAB, "--set", "model.lora_dropout=1"], ["model.lora_dropout", "below 1"]),
    ("train-zero-lora-layers", ["train", *LAB, "--set", "model.lora_layers=0"], ["model.lora_layers", "at least 1"]),
    ("train-negative-workers", ["train", *LAB, "--set", "env.workers=-1"], ["env.workers must be >= 0"]),
    ("train-negative-seed", ["train", *LAB, "--seed", "-1"], ["train.seed", "4294967295"]),
    ("train-seed-too-large", ["train", *LAB, "--seed", "5000000000"], ["train.seed", "4294967295"]),
    ("train-zero-threads", ["train", *LAB, "--threads", "0"], ["train.threads must be at least 1"]),
    # item 9: plan made the settings checks train makes
    ("plan-zero-token-budget", ["plan", "quickstart", "--set", "optim.token_budget=0"],
     ["optim.token_budget must be at least 1"]),
    ("plan-negative-token-budget", ["plan", "quickstart", "--set", "optim.token_budget=-8"], ["optim.token_budget"]),
    ("plan-negative-lr", ["plan", "quickstart", "--set", "optim.lr=-1"], ["optim.lr"]),
    ("plan-negative-warmup", ["plan", "quickstart", "--set", "optim.warmup_steps=-1"], ["optim.warmup_steps", ">= 0"]),
    ("plan-zero-temperature", ["plan", "quickstart", "--set", "rollout.temperature=0"], ["rollout.temperature"]),
    ("plan-unknown-estimator", ["plan", "quickstart", "--set", "estimator.name=gagp"], ["gagp", "gagpo"]),
    # item 8: --gpu-gib
    ("plan-zero-gpu-gib", ["plan", "quickstart", "--gpu-gib", "0"], ["--gpu-gib", "> 0"]),
    ("plan-negative-gpu-gib", ["plan", "quickstart", "--gpu-gib", "-1"], ["--gpu-gib", "> 0"]),
    ("plan-nan-gpu-gib", ["plan", "quickstart", "--gpu-gib", "nan"], ["--gpu-gib", "nan"]),
    ("plan-inf-gpu-gib", ["plan", "quickstart", "--gpu-gib", "inf"], ["--gpu-gib", "inf"]),
    # item 3 through ablate: the grid is refused by the same check, before anything is written
    ("ablate-negative-lr-grid", ["ablate", "lab-alfworld", "--grid", "optim.lr=-1,0.02", "--dry-run"],
     ["cell 'optim.lr=-1'", "optim.lr", "> 0"]),
    ("ablate-clip-low-grid", ["ablate", "lab-alfworld", "--grid", "optim.clip_low=0.2,1.5", "--dry-run"],
     ["optim.clip_low"]),
    ("ablate-negative-seed-set", ["ablate", "lab-alfworld", "--grid", "lambda", "--set", "train.seed=-3",
                                  "--dry-run"], ["train.seed"]),
    # items 6 and 11: --run-name is a name
    ("run-name-parent-path", ["train", *LAB, "--run-name", "../../x"], ["'../../x' is a path", "--output-dir"]),
    ("run-name-with-separator", ["train", *LAB, "--run-name", "a/b"], ["'a/b' is a path"]),
    ("run-name-dot-dot", ["train", *LAB, "--run-name", ".."], ["'..' is a path"]),
    ("run-name-dot", ["train", *LAB, "--run-name", "."], ["'.' is a path"]),
    ("run-name-empty", ["train", *LAB, "--run-name", ""], ["--run-name", "empty"]),
    ("run-name-blank-set", ["train", *LAB, "--set", "logging.run_name=' '"], ["--run-name", "empty"]),
    ("run-name-too-long", ["train", *LAB, "--run-name", LONG_NAME], ["300 bytes", "at most 255"]),
    ("run-name-too-long-new-output-dir", ["train", *LAB, "--output-dir", "new/runs", "--run-name", LONG_NAME],
     ["300 bytes"]),
    # item 12: an experiment must say something
    ("empty-experiment", ["train", "empty.yaml"], ["empty.yaml", "experiment file is empty"]),
    ("comments-only-experiment", ["plan", "comments.yaml"], ["comments.yaml", "experiment file is empty"]),
    ("empty-mapping-experiment", ["ablate", "braces.yaml", "--grid", "lambda", "--dry-run"],
     ["experiment file is empty"]),
]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty working folder with three experiment files that say nothing."""
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "comments.yaml").write_text("# an experiment, some day\n")
    (tmp_path / "braces.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_setting_is_one_line_exit_2_and_leaves_nothing_behind(folder, args, words):
    before = _listing(folder)
    code, out, err = run_cli(args)
    assert_one_error_line(code, out, err, words)
    assert _listing(folder) == before


@pytest.mark.parametrize("overrides", [["optim.lr=-1"], ["optim.clip_low=-0.2"], ["optim.token_budget=0"],
                                       ["train.seed=-1"], ["logging.run_name=../x"]])
def test_train_plan_and_ablate_share_one_check(overrides):
    """The check ``gagpo plan`` makes (``launching=False``) refuses what ``gagpo train`` refuses."""
    cfg = load_config("quickstart", overrides)
    with pytest.raises(UsageError) as train_refusal:
        check_settings(cfg)
    with pytest.raises(UsageError) as plan_refusal:
        check_settings(cfg, launching=False)
    assert str(train_refusal.value) == str(plan_refusal.value)


def test_plan_plans_offload_for_gpus_it_does_not_have(folder, monkeypatch):
    """``plan`` skips what only the launching process knows: optimizer offload needs torchrun and a GPU."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code, out, err = run_cli(["plan", "alfworld-gagpo", "--parallel", "fsdp", "--set", "model.offload_optimizer=true",
                              "--gpus", "2", "--gpu-gib", "80"])
    assert code == 0, err
    assert "memory plan of" in out


def test_an_ignored_estimator_option_is_one_warning_line(folder):
    """similarity_threshold without grouping: similarity is ignored, with one warning line (not Python's
    UserWarning with a file path and source line); the lr refusal after it keeps the run from starting."""
    code, _, err = run_cli(["train", *LAB, "--set", "estimator.options.similarity_threshold=0.8", "--set",
                            "optim.lr=-1"])
    lines = err.strip().splitlines()
    assert code == 2
    assert lines[0] == ("warning: estimator 'gagpo' groups states with grouping='exact'; option "
                        "'similarity_threshold' ignored (it applies to grouping='similarity')")
    assert lines[1].startswith("error: optim.lr") and len(lines) == 2
    assert "UserWarning" not in err and ".py:" not in err


def test_reflexion_options_with_another_agent_are_one_warning_line(folder):
    code, out, err = run_cli(["eval", "--env", "sokoban", "--policy", "expert", "--episodes", "1", "--trials", "3",
                              "--memory", "2"])
    assert code == 0, err
    assert err.strip().splitlines() == ["warning: --trials and --memory apply to --agent reflexion only; ignored "
                                        "with --agent plain"]
