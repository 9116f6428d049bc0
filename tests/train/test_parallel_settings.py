"""``model.parallel`` and its memory options: what ``check_settings`` accepts and refuses (one line each)."""

from __future__ import annotations

import pytest

from gagpo_cli.config import load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.train.config_checks import check_settings


def _refusal(overrides: list[str], experiment: str = "alfworld-gagpo") -> str:
    with pytest.raises(UsageError) as err:
        check_settings(load_config(experiment, overrides))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_defaults_and_fsdp_on_a_language_model_pass(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = load_config("alfworld-gagpo")
    model = cfg.model
    assert (model.parallel, model.activation_checkpointing, model.offload_optimizer) == ("ddp", False, False)
    check_settings(cfg)
    check_settings(load_config("alfworld-gagpo", ["model.parallel=fsdp",
                                                  "model.activation_checkpointing=true"]))


def test_unknown_parallel_mode_names_the_choices():
    message = _refusal(["model.parallel=zero3"])
    assert "model.parallel" in message and "ddp" in message and "fsdp" in message


def test_fsdp_refused_for_a_policy_kind_that_is_not_a_language_model():
    assert "featurised policy bow-mlp" in _refusal(["model.parallel=fsdp"], "lab-alfworld")
    refusal = _refusal(["model.activation_checkpointing=true"], "lab-alfworld")
    assert "model.activation_checkpointing" in refusal


def test_fsdp_refused_in_score_mode():
    assert "action_mode generate only" in _refusal(["model.parallel=fsdp", "rollout.action_mode=score",
                                                    "rollout.engine=hf"])


def test_fsdp_refused_with_the_vllm_engine():
    assert "rollout.engine: hf" in _refusal(["model.parallel=fsdp", "rollout.engine=vllm"])


def test_offload_refused_without_fsdp_on_a_cpu_policy_and_in_one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert "needs model.parallel: fsdp" in _refusal(["model.offload_optimizer=true"])
    assert "torchrun --nproc_per_node" in _refusal(["model.parallel=fsdp", "model.offload_optimizer=true"])
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert "this policy runs on cpu" in _refusal(["model.parallel=fsdp", "model.offload_optimizer=true",
                                                  "model.device=cpu"])
