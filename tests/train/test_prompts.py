"""Prompt rendering (task, step count, last pairs, observation, actions, format) and action parsing."""

from __future__ import annotations

from environments.alfworld import ALFWorldEnvironment
from environments.webshop import WebShopEnvironment
from gagpo_cli.train.prompts import GENERIC_ROLE, parse_action, render_prompt


def _render(env: str = "alfworld", **kw):
    args = dict(goal="put a clean apple in the fridge.", observation="You are in the kitchen.",
                admissible_actions=("go to fridge 1", "look"), history=[], step_count=0)
    args.update(kw)
    return render_prompt(env, **args)


def test_first_turn_has_task_observation_actions_and_format():
    text = _render()
    assert ALFWorldEnvironment.role in text
    assert "Your task is to: put a clean apple in the fridge." in text
    assert "You have not taken any step yet." in text
    assert "You are in the kitchen." in text
    assert "'go to fridge 1', 'look'" in text
    assert "<think>" in text and "<action>" in text
    assert "[Observation" not in text


def test_history_is_numbered_by_real_step_and_counts_steps():
    history = [("obs three", "act three"), ("obs four", "act four")]
    text = _render(history=history, step_count=4)
    assert "You have already taken 4 step(s)." in text
    assert "[Observation 3: obs three]\n[Action 3: act three]" in text
    assert "[Observation 4: obs four]\n[Action 4: act four]" in text
    assert text.index("obs three") < text.index("obs four") < text.index("You are in the kitchen.")
    assert "(step 5)" in text


def test_a_goal_that_already_says_your_task_is_not_doubled():
    text = _render(goal="Your task is to: put some bowl on cabinet.")
    assert "Your task is to: put some bowl on cabinet." in text and text.count("Your task is to") == 1


def test_each_environment_has_its_role_and_others_get_the_generic_one():
    assert WebShopEnvironment.role in _render("webshop")
    assert GENERIC_ROLE in _render("corridor")  # a name no entry point declares
    assert GENERIC_ROLE in _render("sokoban")  # a registered environment that declares no role
    assert ALFWorldEnvironment.role not in _render("webshop")


def test_parse_action_takes_the_last_tagged_action_stripped():
    assert parse_action("<think>go</think><action> go to fridge 1 </action>") == "go to fridge 1"
    assert parse_action("<action>a</action> then <action>b</action>") == "b"
    assert parse_action("<ACTION>click[buy now]</ACTION>") == "click[buy now]"
    assert parse_action("<action>multi\nline</action>") == "multi\nline"


def test_parse_action_malformed_is_none():
    for text in ("go to fridge 1", "<action>unclosed", "<action>  </action>", "</action>x<action>", ""):
        assert parse_action(text) is None, text
