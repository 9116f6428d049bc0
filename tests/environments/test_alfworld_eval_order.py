"""Evaluation order on the real ALFWorld engine (``backend="textworld"``): game files in path order are
grouped by task type (alfworld's folders start with the long task type name), so the first games in
path order miss types; the evaluation order interleaves them. The games are written by this test
(embedded games exported as PDDL, as in ``test_alfworld_textworld.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

for _module in ("alfworld", "textworld", "fast_downward"):
    pytest.importorskip(
        _module, reason="the textworld backend needs the 'alfworld' extra: pip install 'gagpo[alfworld]'"
    )

from environments.alfworld import ALFWorldEnvironment, catalog, generator, pddl_export  # noqa: E402
from environments.alfworld.textworld_backend import alfworld_paths  # noqa: E402
from environments.pool import EnvPool  # noqa: E402
from gagpo_cli.episodes import evaluation_specs  # noqa: E402
from gagpo_cli.evaluate import evaluate  # noqa: E402

LONG_NAME = {short: long for long, short in catalog.LONG_TASK_TYPES.items()}
GAMES_PER_TYPE = {"pick": 3, "look": 2, "clean": 1, "heat": 1, "cool": 1, "pick2": 1}


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    """valid_unseen with 9 games in alfworld's layout ``<long task type>-<k>/trial_1``."""
    root = tmp_path_factory.mktemp("alfworld_grouped")
    domain, grammar = (Path(p).read_text() for p in alfworld_paths())
    for task_type, count in GAMES_PER_TYPE.items():
        task_ids = [i for i in range(134) if generator.task_type_of(i) == task_type][:count]
        for k, task_id in enumerate(task_ids):
            folder = root / "json_2.1.1" / "valid_unseen" / f"{LONG_NAME[task_type]}-{k}" / "trial_1"
            pddl_export.write_game_dir(generator.generate("valid_unseen", task_id), folder, domain, grammar)
    return {"backend": "textworld", "data_dir": str(root), "step_timeout_s": 30}


def test_path_order_is_grouped_and_the_evaluation_order_is_not(options):
    env = ALFWorldEnvironment(**options)
    types = env.split_task_types("valid_unseen")
    assert types == ("look", "look", "pick", "pick", "pick", "clean", "cool", "heat", "pick2")  # sorted paths
    assert len(set(types[:6])) == 3  # the first six games in path order miss three types
    order = env.evaluation_order("valid_unseen")
    assert sorted(order) == list(range(9))
    assert [types[i] for i in order[:6]] == list(catalog.TASK_TYPES)
    with EnvPool("alfworld", options) as pool:
        specs = evaluation_specs(pool, "valid_unseen", 20, seed=0)
    assert sorted(task_id for _, task_id, _ in specs) == list(range(9))  # N >= 9: every game once


def test_the_first_six_episodes_play_one_game_of_every_type(options):
    # one step per episode: which games are played is fixed before any step (the order), not by playing
    result = evaluate("alfworld", "expert", episodes=6, split="valid_unseen", options=options, max_steps=1)
    assert result["per_type_episodes"] == dict.fromkeys(catalog.TASK_TYPES, 1)
    assert result["crashed"] == 0
