"""WebShop in score mode: the search box becomes candidate queries built from the instruction, so every
step's action set is finite; the trainer applies it by default in score mode."""

from __future__ import annotations

import pytest

from environments.base import score_mode_env_options
from environments.webshop.environment import WebShopEnvironment
from environments.webshop.queries import candidate_queries
from gagpo_cli.config import load_config


def test_queries_follow_the_rule():
    text = "i'm looking for a heat resistant hair extension with color: dark brown, and price lower than 70.00 dollars"
    qs = candidate_queries(text, 5)
    assert qs[0] == "heat resistant hair extension with color dark brown"  # opening, article, price gone
    assert qs[1] == "heat resistant hair extension"  # up to the first option
    assert "dollars" not in " ".join(qs) and len(set(qs)) == len(qs)
    assert candidate_queries(text, 2) == qs[:2] and candidate_queries(text, 0) == ()


def test_search_box_offers_the_queries_and_they_search():
    env = WebShopEnvironment(search_queries=3)
    ep = env.new_episode()
    first = ep.reset("train", 0)
    assert len(first.admissible_actions) == 3 and all(a.startswith("search[") for a in first.admissible_actions)
    assert "<your query>" not in " ".join(first.admissible_actions)
    step = ep.step(first.admissible_actions[1])
    assert step.valid and any(a.startswith("click[") for a in step.admissible_actions)
    plain = WebShopEnvironment().new_episode().reset("train", 0)
    assert plain.admissible_actions == ("search[<your query>]",)  # generate mode unchanged
    with pytest.raises(ValueError, match="search_queries"):
        WebShopEnvironment(search_queries=-1)


def test_score_mode_applies_the_environment_options_unless_set():
    cfg = load_config(None, ["env.name=webshop", "rollout.action_mode=score"])
    assert score_mode_env_options(cfg.env.name, cfg.env.options) == {"search_queries": 4}
    cfg = load_config(None, ["env.name=webshop", "env.options={search_queries: 2}"])
    assert score_mode_env_options(cfg.env.name, cfg.env.options) == {"search_queries": 2}
