"""The policy kinds are consistent: every registered kind's class imports and loads, acts in exactly the
action modes it declares (and offers the Protocol each needs), any other model name is a language model,
and a new kind is one class and one ``gagpo.policy_kinds`` entry point that the trainer, its checkpoints
and ``gagpo eval`` take as they are."""

from __future__ import annotations

import pytest
import torch
from envs import plugin_on_sys_path
from envs.buttons import ButtonsEnvironment
from envs.third_party import WordScorer
from tiny_model import tiny_model, tiny_tokenizer

from environments.pool import EnvPool
from gagpo_cli.config import ModelConfig, load_config
from gagpo_cli.episodes import run_episodes
from gagpo_cli.errors import UsageError
from gagpo_cli.models import ModelUnavailableError
from gagpo_cli.prompting import check_generates
from gagpo_cli.train.acting.agent import load_agent
from gagpo_cli.train.acting.modes import action_mode_names
from gagpo_cli.train.policies.kinds import LANGUAGE_MODEL, PolicyKind, load_policy, policy_kind
from gagpo_cli.train.policies.lm import Policy
from gagpo_cli.train.policies.protocol import GeneratingPolicy, ScoringPolicy, TrainablePolicy
from gagpo_cli.train.policies.scoring import ScoreInput
from gagpo_cli.train.recipe import train
from gagpo_cli.train.records import read_metrics
from gagpo_core import plugins

KINDS = [*(policy_kind(name) for name in plugins.plugin_names(plugins.POLICY_KINDS)), LANGUAGE_MODEL]
STEP = ScoreInput("corridor", "reach the end", "You are at 1.", [], 0, ("right", "left", "wait"))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A tiny language model saved as a transformers folder (what any non-table ``model.name`` loads)."""
    folder = tmp_path_factory.mktemp("tiny-lm")
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _name(kind: PolicyKind, folder) -> str:
    return str(folder) if kind is LANGUAGE_MODEL else kind.name


def test_every_kind_is_keyed_by_its_name_and_declares_known_modes():
    assert "bow-mlp" in plugins.plugin_names(plugins.POLICY_KINDS)
    for name in plugins.plugin_names(plugins.POLICY_KINDS):
        assert policy_kind(name).name == name and policy_kind(name) == policy_kind(name)
    for kind in KINDS:
        assert kind.action_modes and set(kind.action_modes) <= set(action_mode_names()), kind.name
        assert callable(getattr(kind.policy_class, "load", None)), kind.name
        assert kind.writes_text == ("generate" in kind.action_modes)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_loads_and_acts_in_exactly_its_declared_modes(kind, model_folder):
    cfg = ModelConfig(name=_name(kind, model_folder), dtype="float32", device="cpu", lora_rank=4, lora_alpha=8)
    policy = load_policy(cfg, seed=0)
    assert isinstance(policy, kind.policy_class) and isinstance(policy, TrainablePolicy)
    assert policy.device == kind.device(cfg)  # known before loading
    assert tuple(policy.action_modes) == kind.action_modes
    assert policy.trainable_parameters()
    assert isinstance(policy, ScoringPolicy) == ("score" in kind.action_modes)
    assert isinstance(policy, GeneratingPolicy) == ("generate" in kind.action_modes)
    if "score" in kind.action_modes:
        with torch.no_grad():
            out = policy.score_actions([STEP], with_state=True)
        assert out.logits[0].shape == (3,) and out.state.shape == (1, policy.hidden_size)
    if "generate" in kind.action_modes:
        (gen,) = policy.generate([policy.chat_prompt("go east")], temperature=0.0, max_new_tokens=3)
        assert 1 <= len(gen.response_ids) <= 3
    for mode in action_mode_names():
        refusal = kind.mode_refusal(mode)
        assert (refusal is None) == (mode in kind.action_modes), (kind.name, mode)


def test_a_kind_that_only_scores_is_refused_where_text_is_written():
    score_only = [k for k in KINDS if not k.writes_text]
    assert score_only  # bow-mlp
    for kind in score_only:
        assert kind.mode_refusal("generate") == f"the {kind.label} only ranks admissible actions"
        with pytest.raises(UsageError, match=f"{kind.label} only ranks admissible actions"):
            check_generates("react", "score", kind.name)


def test_any_other_model_name_goes_to_the_language_model_loader(model_folder, tmp_path):
    for name in ("smollm2-135m-instruct", "Qwen/Qwen2.5-1.5B-Instruct", str(model_folder), "BOW-MLP"):
        assert policy_kind(name) is LANGUAGE_MODEL
    assert LANGUAGE_MODEL.exportable and LANGUAGE_MODEL.model_source and LANGUAGE_MODEL.shardable
    assert type(load_policy(ModelConfig(name=str(model_folder), device="cpu", dtype="float32"))) is Policy
    with pytest.raises(ModelUnavailableError, match="no-such-model"):  # the LM loader's own error
        load_policy(ModelConfig(name=str(tmp_path / "no-such-model"), device="cpu"))


@pytest.fixture
def word_scorer_kind(tmp_path):
    """``word-scorer`` registered as a policy kind by an entry point of a package put on the path."""
    entry_points = {"gagpo.policy_kinds": {"word-scorer": "envs.third_party:WordScorer"}}
    with plugin_on_sys_path(tmp_path / "plugin", entry_points):
        yield policy_kind("word-scorer")


@pytest.mark.integration
def test_a_new_kind_is_one_class_and_one_entry_point(word_scorer_kind, tmp_path):
    kind = word_scorer_kind
    assert kind.policy_class is WordScorer and not kind.exportable and not kind.model_source
    cfg = load_config(None, ["model.name=word-scorer", "rollout.action_mode=score", "env.name=buttons",
                             "rollout.tasks_per_batch=4", "rollout.group_size=4", "optim.lr=0.05",
                             "train.iterations=3", "train.eval_every=0", "train.eval_episodes=0",
                             "train.save_every=3", "train.threads=1", f"logging.output_dir={tmp_path}"])
    with EnvPool.from_environment(ButtonsEnvironment()) as pool:
        run_dir = train(cfg, env_pool=pool)
        assert [m["iteration"] for m in read_metrics(run_dir)] == [1, 2, 3]
        agent = load_agent(str(run_dir))  # the checkpoint, loaded through the table
        assert isinstance(agent.policy, WordScorer) and agent.action_mode == "score"
        assert agent.policy.weights.weight.abs().sum() > 0  # trained, not the zero start
        episodes, _, _ = run_episodes(pool, agent, [("test", i, i) for i in range(4)], batch_size=4)
    assert len(episodes) == 4
    with pytest.raises(UsageError, match="word scorer only ranks admissible actions"):
        check_generates("react", "score", kind.name)
