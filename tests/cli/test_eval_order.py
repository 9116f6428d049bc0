"""The order of evaluation tasks: interleaved by task type where an environment declares the types
(``Environment.split_task_types``), task id order where it does not; every task at most once."""

from __future__ import annotations

from collections import Counter

import pytest
from envs import plugin_on_sys_path
from envs.corridor import CorridorEnvironment

from environments.alfworld import ALFWorldEnvironment, catalog
from environments.base import stratified_order
from environments.pool import EnvPool
from environments.webshop.environment import CATEGORIES, WebShopEnvironment
from gagpo_cli.episodes import derive_seed, evaluation_specs
from gagpo_cli.evaluate import evaluate


def test_stratified_order_by_hand():
    # a: ids 0, 1, 2 at places 0, 1/3, 2/3; b: id 3 at 0; c: ids 4, 5 at 0, 1/2; ties in the order c, a, b
    assert stratified_order(["a", "a", "a", "b", "c", "c"], ("c", "a", "b")) == (4, 0, 3, 1, 5, 2)
    assert stratified_order(["x", "y", "x", "y"]) == (0, 1, 2, 3)  # equal sizes: round-robin
    assert stratified_order(["y", "y", "x", "x"], ("x",)) == (2, 0, 3, 1)  # declared types first
    assert stratified_order([]) == ()


@pytest.mark.parametrize("sizes", [[5, 5, 5], [24, 18, 31, 23, 21, 17], [1, 40, 3], [125, 76, 125, 92, 82]])
def test_every_prefix_covers_the_types_in_their_shares(sizes):
    types = [f"t{k}" for k, size in enumerate(sizes) for _ in range(size)]  # grouped, as path order is
    order = stratified_order(types, sorted(set(types)))
    assert sorted(order) == list(range(len(types)))
    assert {types[i] for i in order[:len(sizes)]} == set(types)  # the first K: one of each type
    n = len(types)
    for cut in range(1, n + 1):
        counts = Counter(types[i] for i in order[:cut])
        for k, size in enumerate(sizes):  # within (-K * m / n, 1] of the share cut * m / n
            assert -len(sizes) * size / n < counts[f"t{k}"] - cut * size / n <= 1, (cut, k)


def test_embedded_alfworld_order_is_its_id_order_which_already_alternates_types():
    env = ALFWorldEnvironment()
    for split in env.splits:
        assert env.evaluation_order(split) == tuple(range(env.num_tasks(split)))
    assert env.split_task_types("valid_unseen")[:6] == catalog.TASK_TYPES


def test_embedded_alfworld_first_episodes_cover_every_type_and_all_play_each_task_once():
    options = {"valid_unseen_tasks": 14}
    first = evaluate("alfworld", "expert", episodes=6, split="valid_unseen", options=options)
    assert first["per_type_episodes"] == dict.fromkeys(catalog.TASK_TYPES, 1) and first["success_rate"] == 100.0
    every = evaluate("alfworld", "expert", episodes=50, split="valid_unseen", options=options)
    assert every["episodes"] == 14 and sorted(e["task_id"] for e in every["per_episode"]) == list(range(14))


def test_webshop_first_episodes_cover_every_category_in_its_share():
    env = WebShopEnvironment()
    types = env.split_task_types("test")
    assert len(types) == env.num_tasks("test") == 500
    assert len(set(types[:5])) < 5  # id order alone would miss categories ...
    order = env.evaluation_order("test")
    assert sorted(order) == list(range(500))
    assert {types[i] for i in order[:5]} == set(CATEGORIES)  # ... the evaluation order does not
    share, first = Counter(types), Counter(types[i] for i in order[:100])
    assert all(abs(first[c] - share[c] / 5) <= 1 for c in CATEGORIES)
    result = evaluate("webshop", "expert", episodes=5, seed=2)
    assert set(result["per_type"]) == set(CATEGORIES)
    assert [e["task_id"] for e in result["per_episode"]] == list(order[:5])


def test_specs_take_the_order_and_seeds_and_stop_at_the_split_size():
    with EnvPool("webshop") as pool:
        order = pool.evaluation_order("test")
        specs = evaluation_specs(pool, "test", 7, seed=3)
        assert specs == [("test", order[i], derive_seed(3, i)) for i in range(7)]
        everything = evaluation_specs(pool, "test", 10_000, seed=3)
        assert len(everything) == 500 and sorted(t for _, t, _ in everything) == list(range(500))


def test_worker_pools_give_the_same_order():
    with EnvPool("webshop") as local, EnvPool("webshop", workers=2) as remote:
        assert remote.evaluation_order("test") == local.evaluation_order("test")
        assert remote.evaluation_order("train") == local.evaluation_order("train")


def test_an_environment_without_task_types_keeps_id_order(tmp_path):
    with plugin_on_sys_path(tmp_path):
        env = CorridorEnvironment()
        assert env.split_task_types("test") is None
        assert EnvPool.from_environment(env).evaluation_order("test") == tuple(range(env.num_tasks("test")))
        with EnvPool("corridor", workers=1) as remote:
            assert remote.evaluation_order("train") == tuple(range(env.num_tasks("train")))


def test_an_order_that_is_not_every_task_once_is_a_clear_error(tmp_path):
    with plugin_on_sys_path(tmp_path):

        class Repeating(CorridorEnvironment):
            def evaluation_order(self, split: str) -> tuple[int, ...]:
                return (0, 0, *range(2, self.num_tasks(split)))

        with pytest.raises(ValueError, match=r"evaluation_order\('test'\) must list every task id 0..11 exactly once"):
            EnvPool.from_environment(Repeating()).evaluation_order("test")
