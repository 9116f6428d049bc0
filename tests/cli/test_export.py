"""``gagpo export``: a trained run as a standard model folder. Two-iteration runs of a tiny random Llama
(saved as a model folder, so the run's config names a loadable base) on the corridor, one LoRA and one
full fine-tuning; the exported folders are loaded with plain transformers / peft and must give the
trained policy's logits, and ``gagpo eval`` must play them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
from pathlib import Path

import pytest
import torch
from envs import plugin_on_sys_path
from envs.corridor import CorridorEnvironment
from support import run_cli
from tiny_model import tiny_model, tiny_tokenizer

from environments.pool import EnvPool
from gagpo_cli.config import load_config
from gagpo_cli.export import export_run, replay_command
from gagpo_cli.train.acting.agent import load_agent
from gagpo_cli.train.recipe import train

RUN = ["rollout.tasks_per_batch=2", "rollout.group_size=3", "env.max_steps=3", "rollout.max_new_tokens=8",
       "train.iterations=2", "train.eval_every=1", "train.eval_episodes=2", "train.save_every=1", "optim.lr=2e-2",
       "model.dtype=float32", "model.device=cpu", "model.lora_rank=4", "env.name=corridor", "train.threads=1"]
PROMPT = "You are in the hall. Your task is to: go to the kitchen. <action>go east</action>"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A base model folder and finished runs on the corridor: LoRA, full fine-tuning, bow-mlp, and LoRA
    scoring actions with the adapter on the action tokens only (``model.lora_scope=action``)."""
    root = tmp_path_factory.mktemp("export")
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    runs = {}
    for name, sets in (("lora", [f"model.name={root / 'base'}"]),
                       ("full", [f"model.name={root / 'base'}", "model.lora=false"]),
                       ("bow", ["model.name=bow-mlp", "rollout.action_mode=score"]),
                       ("scope", [f"model.name={root / 'base'}", "rollout.action_mode=score", "model.lora_scope=action",
                                  "train.iterations=1", "train.eval_episodes=0"])):
        cfg = load_config(None, [*RUN, *sets, f"logging.output_dir={root / 'runs'}", f"logging.run_name={name}"])
        with EnvPool.from_environment(CorridorEnvironment()) as pool:
            runs[name] = train(cfg, env_pool=pool)
    return root, runs


def _logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def _policy_logits(spec: Path) -> tuple[list[int], torch.Tensor]:
    """(prompt ids, logits) of the trained policy as ``gagpo eval`` loads it (run or checkpoint)."""
    policy = load_agent(str(spec)).policy
    ids = policy.chat_prompt(PROMPT)
    return ids, _logits(policy.base_model, ids)


def _plain(folder: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder)).eval()


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_the_exported_folder_gives_the_trained_policys_logits(world, tmp_path, kind):
    root, runs = world
    done = export_run(runs[kind], tmp_path / "out")
    assert done.iteration == 2 and done.path == tmp_path / "out"
    files = {p.name for p in done.path.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "README.md"} <= files
    assert not any(name.startswith("adapter_") for name in files)  # merged, not an adapter
    ids, trained = _policy_logits(runs[kind])
    exported = _logits(_plain(done.path), ids)
    base = _logits(_plain(root / "base"), ids)
    assert (trained - base).abs().max() > 1e-3  # training moved the weights: a missing merge would show
    torch.testing.assert_close(exported, trained, atol=2e-5, rtol=1e-5)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(done.path))(PROMPT)["input_ids"] == tiny_tokenizer()(PROMPT)["input_ids"]


def test_generation_config_samples_as_the_run_evaluated(world, tmp_path):
    _, runs = world
    done = export_run(runs["lora"], tmp_path / "out")
    generation = json.loads((done.path / "generation_config.json").read_text())
    assert generation["do_sample"] is True and generation["temperature"] == 0.4  # rollout.eval_temperature
    assert generation["top_k"] == 0 and generation["top_p"] == 1.0 and generation["max_new_tokens"] == 8
    assert tiny_tokenizer().eos_token_id in generation["eos_token_id"]


def test_an_earlier_iteration_and_its_evaluation_go_into_the_card(world, tmp_path):
    _, runs = world
    run = runs["lora"]
    done = export_run(run, tmp_path / "one", iteration=1)
    ids, trained = _policy_logits(run / "checkpoints" / "iter_000001")
    torch.testing.assert_close(_logits(_plain(done.path), ids), trained, atol=2e-5, rtol=1e-5)
    assert (trained - _policy_logits(run)[1]).abs().max() > 1e-4  # iteration 1 is not iteration 2
    card = (done.path / "README.md").read_text()
    evaluation = json.loads((run / "evals" / "iter_000001.json").read_text())
    assert done.evaluation == evaluation
    for words in ("# lora (iteration 1)", "| estimator | `gagpo`", "| environment | `corridor`",
                  "| iteration exported | 1 of 2 |", f"success rate: {evaluation['success_rate']:.1f} %",
                  f"{evaluation['episodes']} episodes", "LoRA merged"):
        assert words in card, words
    final = json.loads((run / "eval.json").read_text())
    last = export_run(run / "checkpoints" / "iter_000002", tmp_path / "two")  # a checkpoint folder works too
    assert last.iteration == 2 and last.evaluation == final


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft on transformers v5
def test_adapter_only_loads_onto_the_base_with_peft(world, tmp_path):
    from peft import PeftModel

    root, runs = world
    done = export_run(runs["lora"], tmp_path / "adapter", adapter_only=True)
    files = {p.name for p in done.path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "README.md"} <= files
    assert "model.safetensors" not in files
    assert json.loads((done.path / "adapter_config.json").read_text())["base_model_name_or_path"] == str(
        (root / "base").resolve())
    assert "LoRA adapter (PEFT)" in (done.path / "README.md").read_text()
    ids, trained = _policy_logits(runs["lora"])
    loaded = PeftModel.from_pretrained(_plain(root / "base"), str(done.path)).eval()
    torch.testing.assert_close(_logits(loaded, ids), trained, atol=2e-5, rtol=1e-5)


def test_dtype_is_the_bases_unless_asked(world, tmp_path):
    _, runs = world
    assert next(_plain(export_run(runs["full"], tmp_path / "auto").path).parameters()).dtype == torch.float32
    half = export_run(runs["full"], tmp_path / "bf16", dtype="bfloat16").path
    assert json.loads((half / "config.json").read_text())["dtype"] == "bfloat16"


def test_gagpo_eval_plays_the_exported_folder(world, tmp_path):
    _, runs = world
    code, out, err = run_cli(["export", str(runs["lora"]), "--out", str(tmp_path / "model")])
    assert code == 0, err
    assert "wrote iteration 2" in out
    # a model folder writes up to 512 tokens a step: a one-step episode (corridor option max_steps)
    with plugin_on_sys_path(tmp_path / "plugin"):
        code, _, err = run_cli(["eval", "--policy", str(tmp_path / "model"), "--env", "corridor", "--episodes", "1",
                                 "--option", "max_steps=1", "--json", str(tmp_path / "eval.json")])
    assert code == 0, err
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["episodes"] == 1 and result["policy"] == str(tmp_path / "model")
    assert [e["length"] for e in result["per_episode"]] == [1]


def test_the_newest_intact_checkpoint_is_the_default(world, tmp_path):
    _, runs = world
    run = shutil.copytree(runs["lora"], tmp_path / "damaged")
    weights = run / "checkpoints" / "iter_000002" / "policy" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    code, out, err = run_cli(["export", str(run), "--out", str(tmp_path / "out")])
    assert code == 0, err
    assert "skipping iter_000002" in err and "wrote iteration 1" in out
    assert (run / "checkpoints" / "iter_000002").is_dir()  # export only reads a run: nothing is set aside
    code, _, err = run_cli(["export", str(run), "--out", str(tmp_path / "asked"), "--iteration", "2"])
    assert code == 2 and "corrupt checkpoint" in err and "sha256" in err


def test_bad_input_is_one_line_and_exit_2(world, tmp_path):
    root, runs = world
    no_checkpoint = tmp_path / "no-checkpoint"
    no_checkpoint.mkdir()
    shutil.copy(runs["lora"] / "config.yaml", no_checkpoint / "config.yaml")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine\n")
    out = str(tmp_path / "out")
    cases = [
        (["export", str(no_checkpoint), "--out", out], ["has no checkpoint"]),
        (["export", str(runs["lora"]), "--out", out, "--iteration", "7"], ["no checkpoint of iteration 7", "1, 2"]),
        (["export", str(runs["lora"]), "--out", str(taken)], ["already exists", "not an empty folder"]),
        (["export", str(runs["bow"]), "--out", out], ["bow-mlp", "not a transformers model"]),
        (["export", str(runs["scope"]), "--out", out], ["model.lora_scope=action", "cannot be exported"]),
        (["export", str(root / "base"), "--out", out], ["not a training run directory"]),
        (["export", str(tmp_path / "missing"), "--out", out], ["does not exist"]),
        (["export", str(runs["full"]), "--out", out, "--adapter-only"], ["needs a LoRA run"]),
        (["export", str(runs["lora"]), "--out", out, "--dtype", "int8"], ["--dtype 'int8'"]),
        (["export", str(runs["lora"])], ["--out"]),
    ]
    for args, words in cases:
        code, _, err = run_cli(args)
        assert code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
        for word in words:
            assert word in " ".join(err.split()), (args, word, err)
    assert not Path(out).exists()
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]


def test_an_empty_current_folder_takes_the_export_readable_by_others(world, tmp_path, monkeypatch):
    _, runs = world
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    old = os.umask(0o022)
    try:
        code, out, err = run_cli(["export", str(runs["full"]), "--out", "."])
    finally:
        os.umask(old)
    assert code == 0, err
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in Path(".").iterdir()}
    assert {"config.json", "model.safetensors", "README.md"} <= set(files)
    assert set(files.values()) == {0o644}  # as save_pretrained leaves them, not the temporary files' 0600
    assert _plain(Path(".")) is not None


def test_the_model_card_replays_the_runs_evaluation(world, tmp_path):
    _, runs = world
    done = export_run(runs["full"], tmp_path / "model")
    assert stat.S_IMODE(done.path.stat().st_mode) & 0o055 == 0o055  # group and others may read the folder
    card = (done.path / "README.md").read_text()
    command = card.split("```bash\n")[1].split("\n```")[0]
    args = shlex.split(command.replace("\\\n", " "))
    assert args[:4] == ["gagpo", "eval", "--policy", "PATH_TO_THIS_FOLDER"]
    assert "--max-new-tokens 8" in command and "--episodes 2" in command  # the run's, not eval's defaults
    args[3] = str(done.path)
    with plugin_on_sys_path(tmp_path / "plugin"):
        code, out, err = run_cli([*args[1:], "--max-steps", "1", "--json", str(tmp_path / "eval.json")])
    assert code == 0, err
    assert "forecast: at most about" in out  # said before a generating model's evaluation
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["max_new_tokens"] == 8 and result["episodes"] == 2


def test_a_score_mode_run_is_replayed_in_score_mode():
    cfg = load_config(None, ["rollout.action_mode=score", "env.name=webshop", "env.eval_split=test",
                             "train.eval_max_steps=15", "env.options.data_dir=/data/web shop",
                             "env.options.num_products=100"])
    command = replay_command(cfg)
    assert command.startswith("gagpo eval --policy PATH_TO_THIS_FOLDER \\\n    --env webshop \\\n")
    args = shlex.split(command.replace("\\\n", " "))
    for flag, value in (("--action-mode", "score"), ("--split", "test"), ("--max-steps", "15")):
        assert args[args.index(flag) + 1] == value
    assert "--max-new-tokens" not in args  # score mode writes no tokens
    assert [args[i + 1] for i, a in enumerate(args) if a == "--option"] == ["data_dir=/data/web shop",
                                                                            "num_products=100"]
