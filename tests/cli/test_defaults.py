"""The built-in defaults are the paper's files' settings, except where gagpo_cli/config.py's docstring
says they differ (and why)."""

from __future__ import annotations

import pytest

from gagpo_cli import config
from gagpo_cli.config import ExperimentConfig, load_config
from gagpo_cli.train.config_match import flat

PAPER_FILES = ["alfworld-gagpo", "alfworld-gigpo", "webshop-gagpo", "webshop-gigpo"]
# Where the defaults differ on purpose (each named in the config docstring): the model and how it is
# trained, the environment and its step budget (None = the environment's own, the paper's), the
# estimator and its options (empty = the estimator's defaults), and the descriptive fields.
DOCUMENTED = ("name", "description", "model.name", "model.lora", "env.name", "env.max_steps", "estimator.")




@pytest.mark.parametrize("experiment", PAPER_FILES)
def test_defaults_equal_the_paper_files_except_where_documented(experiment):
    defaults = flat(ExperimentConfig().to_dict())
    paper = flat(load_config(experiment).to_dict())
    differ = sorted(k for k in defaults if defaults[k] != paper[k] and not k.startswith(DOCUMENTED))
    assert differ == [], f"defaults differ from {experiment}.yaml in {differ} without saying so"


def test_the_documented_differences_are_the_ones_in_the_docstring():
    text = config.__doc__
    for key in ("``model``", "``env.name``", "``env.max_steps``", "``estimator.options``", "160 iterations",
                "every 10 iterations"):
        assert key in text, key
    defaults = ExperimentConfig()
    assert (defaults.train.iterations, defaults.train.eval_every) == (160, 10)


@pytest.mark.parametrize("experiment", PAPER_FILES)
def test_the_estimator_defaults_are_the_paper_files_options(experiment):
    """``estimator.options`` may be empty by default because each estimator's own defaults are the
    paper's: every option a paper file sets equals that estimator's default, except GiGPO's WebShop
    mode (documented)."""
    from estimators import get_estimator

    cfg = load_config(experiment)
    defaults = get_estimator(cfg.estimator.name).options
    differ = {k: v for k, v in cfg.estimator.options.items() if defaults[k] != v}
    assert differ == ({"mode": "mean_norm"} if experiment == "webshop-gigpo" else {})
