"""Experiment configuration: defaults, YAML files, overrides, validation errors, resolved output."""

from __future__ import annotations

import pytest
import yaml

from gagpo_cli.config import (
    ExperimentConfig,
    builtin_experiments,
    load_config,
    parse_key_value,
    write_resolved_config,
)
from gagpo_cli.errors import UsageError


def test_defaults_are_the_paper_settings():
    cfg = ExperimentConfig()
    assert (cfg.rollout.tasks_per_batch, cfg.rollout.group_size) == (16, 8)
    assert cfg.optim.lr == 1e-6 and cfg.optim.kl_coef == 0.01 and cfg.optim.clip_low == 0.2
    assert cfg.optim.entropy_coef == 0.001 and cfg.optim.epochs == 1
    assert (cfg.rollout.temperature, cfg.rollout.eval_temperature) == (1.0, 0.4)
    assert cfg.rollout.success_reward == 10.0 and cfg.rollout.invalid_penalty == 0.1
    assert cfg.env.history == 2


def test_file_then_overrides_in_order(tmp_path):
    file = tmp_path / "exp.yaml"
    file.write_text("name: mine\noptim:\n  lr: 1e-5\n  epochs: 2\nenv:\n  name: webshop\n  options: {data_dir: /x}\n")
    cfg = load_config(file, ["optim.lr=3e-4", "model.lora=false", "model.lora_targets=[q_proj]"])
    assert cfg.name == "mine"
    assert cfg.optim.lr == 3e-4  # the override wins over the file
    assert cfg.optim.epochs == 2
    assert cfg.env.name == "webshop" and cfg.env.options == {"data_dir": "/x"}
    assert cfg.model.lora is False and cfg.model.lora_targets == ["q_proj"]


def test_yaml_string_floats_are_read_as_floats(tmp_path):
    file = tmp_path / "exp.yaml"
    file.write_text("optim:\n  lr: 1e-6\n")  # YAML 1.1 reads this as a string
    assert load_config(file).optim.lr == pytest.approx(1e-6)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("optim:\n  lrr: 1\n", "unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
        ("optimm:\n  lr: 1\n", "unknown key 'optimm' (did you mean 'optim'?)"),
        ("train:\n  iterations: 1.5\n", "'train.iterations' expects an integer"),
        ("model:\n  lora: maybe\n", "'model.lora' expects true/false"),
        ("model: 3\n", "'model' is a section"),
        ("- a\n- b\n", "expected a mapping"),
        ("optim: [\n", "not valid YAML"),
    ],
)
def test_bad_files_name_the_key_and_the_file(tmp_path, text, fragment):
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    with pytest.raises(UsageError) as info:
        load_config(file)
    assert fragment in str(info.value)
    assert str(file) in str(info.value)


def test_a_yaml_error_names_file_line_and_column_once(tmp_path):
    file = tmp_path / "indent.yaml"
    file.write_text("train:\n  iterations: 3\n   seed: 1\n")
    with pytest.raises(UsageError) as info:
        load_config(file)
    assert str(info.value) == f"{file}:3:8: not valid YAML: mapping values are not allowed here"


def test_bad_overrides_are_usage_errors():
    with pytest.raises(UsageError, match="not KEY=VALUE"):
        load_config(None, ["optim.lr"])
    with pytest.raises(UsageError, match="unknown key 'estimator.nme'"):
        load_config(None, ["estimator.nme=grpo"])
    with pytest.raises(UsageError, match="expects float"):
        load_config(None, ["optim.lr=fast"])


def test_parse_key_value_reads_values_as_yaml():
    assert parse_key_value("a.b=3") == ("a.b", 3)
    assert parse_key_value("a=[1, 2]") == ("a", [1, 2])
    assert parse_key_value("a=x=y") == ("a", "x=y")
    assert parse_key_value("a=") == ("a", "")


def test_missing_experiment_suggests_a_builtin():
    names = list(builtin_experiments())
    assert names, "experiments/ ships at least one YAML file"
    with pytest.raises(UsageError, match="not found") as info:
        load_config(names[0] + "x")
    assert f"Did you mean '{names[0]}'" in str(info.value)


def test_every_builtin_experiment_is_valid():
    for name in builtin_experiments():
        cfg = load_config(name)
        assert cfg.description, f"experiment {name} has a one-line description"


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["optim.lr=2e-5", "env.options={backend: embedded}"])
    path = write_resolved_config(cfg, tmp_path / "run")
    data = yaml.safe_load(path.read_text())
    assert data["optim"]["lr"] == 2e-5
    assert load_config(path) == cfg
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_dotted_overrides_into_a_mapping_add_up_with_the_file():
    cfg = load_config("alfworld-gagpo", ["estimator.options.lam=0.5", "estimator.options.norm=group"])
    assert cfg.estimator.options == {"gamma": 0.95, "lam": 0.5, "norm": "group"}
