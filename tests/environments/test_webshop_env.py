"""Embedded WebShop behind the environment protocol: pages, transitions, determinism, bad input, policies."""

from __future__ import annotations

import random

import pytest

from environments.base import available_environments, get_environment
from environments.webshop import WebShopEnvironment, engine
from environments.webshop.benchmark import random_action
from environments.webshop.engine import SEARCH_TEMPLATE
from environments.webshop.environment import _load


@pytest.fixture(scope="module")
def env() -> WebShopEnvironment:
    return get_environment("webshop")


def rollout(env, split, task_id, policy, seed=0):
    """Run one episode; returns (observations, actions, final step)."""
    rng = random.Random(seed)
    episode = env.new_episode()
    reset = episode.reset(split, task_id, seed)
    observations, actions, step = [reset.observation], [], None
    available = reset.admissible_actions
    for _ in range(env.max_steps):
        action = policy(episode, available, reset.goal, rng)
        step = episode.step(action)
        actions.append(action)
        observations.append(step.observation)
        available = step.admissible_actions
        if step.done:
            break
    return observations, actions, step


def expert(episode, available, goal, rng):
    return episode.expert_action()


def uniform(episode, available, goal, rng):
    return random_action(available, goal, rng)


def test_registered_with_protocol_attributes(env):
    assert "webshop" in available_environments()
    assert env.max_steps == 15
    assert env.splits == ("train", "test")
    assert set(env.task_types) == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert env.num_tasks("test") == 500 and env.num_tasks("train") >= 4500


def test_start_page_text_and_actions(env):
    reset = env.new_episode().reset("test", 3)
    goal = env.goal("test", 3)
    assert reset.observation == f"WebShop [SEP] Instruction: [SEP] {goal.instruction_text} [SEP] Search"
    assert reset.admissible_actions == (SEARCH_TEMPLATE,)
    assert reset.state_key == reset.observation
    assert reset.goal == goal.instruction_text and reset.task_type == goal.category
    assert "price lower than" in goal.instruction_text and goal.instruction_text.startswith(("i ", "find", "get"))


def test_results_and_item_pages_follow_the_original_layout(env):
    episode = env.new_episode()
    reset = episode.reset("test", 0)
    step = episode.step(f"search[{reset.goal.split(', and price')[0]}]")
    parts = step.observation.split(" [SEP] ")
    assert parts[:5] == ["Instruction:", reset.goal, "Back to Search", "Page 1 (Total results: 50)", "Next >"]
    products = parts[5:]
    assert len(products) == 30  # 10 results x (asin, title, price)
    assert all(p.startswith("$") for p in products[2::3])
    assert step.admissible_actions[:2] == ("click[back to search]", "click[next >]")
    asin = products[0]
    assert f"click[{asin.lower()}]" in step.admissible_actions
    page2 = episode.step("click[next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in page2.observation
    episode.step("click[< prev]")
    item = episode.step(f"click[{asin.lower()}]")
    product = env.shop.products[env.shop.index[asin.lower()]]
    expected = ["Instruction:", reset.goal, "Back to Search", "< Prev"]
    for name, values in product.options.items():
        expected += [name, *values]
    expected += [product.title, f"Price: {product.price_tag}", f"Rating: {product.rating}",
                 "Description", "Features", "Reviews", "Buy Now"]
    assert item.observation == " [SEP] ".join(expected)
    assert "click[buy now]" in item.admissible_actions and "click[description]" in item.admissible_actions
    features = episode.step("click[features]")
    assert features.observation.startswith(f"Instruction: [SEP] {reset.goal} [SEP] Back to Search [SEP] < Prev")
    assert features.admissible_actions == ("click[back to search]", "click[< prev]")
    assert episode.step("click[< prev]").observation == item.observation
    assert episode.step("click[back to search]").observation == reset.observation


def test_buy_now_ends_with_the_reward(env):
    observations, actions, step = rollout(env, "test", 5, expert)
    assert actions[-1] == "click[buy now]"
    assert step.done and step.valid and step.won and step.reward == 1.0 and step.score == 1.0
    assert step.extra["reward_info"]["r_type"] == 1.0
    assert step.observation.startswith("Thank you for shopping with us!")


def test_expert_succeeds_on_test(env):
    wins = sum(rollout(env, "test", t, expert)[2].won for t in range(100))
    assert wins >= 95


def test_random_policy_scores_far_lower(env):
    scores = []
    for t in range(100):
        step = rollout(env, "test", t, uniform, seed=t)[2]
        scores.append(step.score if step.done else 0.0)
    assert 100 * sum(scores) / len(scores) < 30


def test_same_task_and_seed_give_identical_observations(env):
    first = rollout(env, "train", 17, uniform, seed=4)
    _load.cache_clear()  # a freshly loaded catalog, goals and search index
    fresh = get_environment("webshop")
    assert fresh.shop is not env.shop
    second = rollout(fresh, "train", 17, uniform, seed=4)
    assert first[0] == second[0] and first[1] == second[1]
    assert [fresh.goal("test", t) for t in range(500)] == [env.goal("test", t) for t in range(500)]


def test_an_engine_failure_is_a_crashed_final_step(env, monkeypatch):
    episode = env.new_episode()
    episode.reset("test", 4)
    while "click[buy now]" not in (step := episode.step(episode.expert_action())).admissible_actions:
        pass

    def broken_reward(*args):
        raise RuntimeError("reward engine failed")

    monkeypatch.setattr(engine, "get_reward", broken_reward)
    step = episode.step("click[buy now]")
    assert step.crashed and step.done and not step.won and "reward engine failed" in step.extra["error"]


def test_same_state_by_two_paths_has_the_same_key(env):
    a, b = env.new_episode(), env.new_episode()
    ra, rb = a.reset("test", 9), b.reset("test", 9)
    assert ra.state_key == rb.state_key
    query = f"search[{ra.goal.split(', and price')[0]}]"
    direct = a.step(query)
    asin = direct.observation.split(" [SEP] ")[5].lower()
    item_a = a.step(f"click[{asin}]")
    # path b: search, open a page of results, go back, open the item via its reviews and back
    b.step("search[something else entirely]")
    b.step("click[back to search]")
    b.step(query)
    b.step("click[next >]")
    b.step("click[< prev]")
    b.step(f"click[{asin}]")
    b.step("click[reviews]")
    item_b = b.step("click[< prev]")
    assert item_a.state_key == item_b.state_key == item_a.observation
    assert a.step("click[< prev]").state_key == direct.state_key


@pytest.mark.parametrize("action", [
    "search[" + "x" * 10_000 + "]", "x" * 10_000, "🛒 ñandú 日本語 \u202e", "", "   ", "search[]", "search[   ]",
    "click[]", "click[not a button]", "click[buy now]", "buy[b000000000]", "click[search]",
])
def test_bad_actions_are_invalid_no_ops(env, action):
    episode = env.new_episode()
    reset = episode.reset("test", 1)
    step = episode.step(action)
    assert not step.valid and not step.done and not step.crashed
    assert step.observation == reset.observation and step.reward == 0.0
    assert episode.step(f"search[{reset.goal[:30]}]").valid  # the episode goes on


def test_steps_after_purchase_are_invalid(env):
    episode = env.new_episode()
    episode.reset("test", 2)
    while not episode.step(episode.expert_action()).done:
        pass
    after = episode.step("click[back to search]")
    assert after.done and not after.valid and after.reward == 0.0


def test_errors_name_the_problem(env):
    with pytest.raises(ValueError, match="valid: data_dir, human_goals, num_products"):
        WebShopEnvironment(colour="red")
    with pytest.raises(ValueError, match="unknown webshop split 'dev'"):
        env.new_episode().reset("dev", 0)
    with pytest.raises(ValueError, match="out of range"):
        env.new_episode().reset("test", 500)


def test_human_goals_option(env):
    human = WebShopEnvironment(human_goals=True)
    assert human.num_tasks("test") == 500 and human.num_tasks("train") >= 4500
    assert human.goal("test", 0).instruction_text != env.goal("test", 0).instruction_text
    assert sum(rollout(human, "test", t, expert)[2].won for t in range(20)) >= 19
