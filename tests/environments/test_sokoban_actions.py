"""Sokoban reads the model's answer as verl-agent's Sokoban projection does (``action_reading: verl``,
the default): the first <action> block, a move word anywhere inside it, any case; ``strict`` keeps the
earlier reading (the last block, exactly a move word). The rollout sends the environment whole answers
(``Environment.reads_answers``), and the history shows the move read."""

from __future__ import annotations

import pytest
import torch

from environments.pool import EnvPool
from environments.sokoban import SokobanEnvironment
from environments.sokoban.actions import read_move
from gagpo_cli.train.acting.rollout import RolloutSettings, TaskSpec, collect
from gagpo_cli.train.policies.lm_generate import Generation

THINK = "<think>The box is right of me.</think>"
# (answer, verl's move, strict's move); verl's column is what verl-agent's sokoban_projection returns
# (``None``: its action 0 with is_action_valid 0)
EXAMPLES = [
    (f"{THINK}<action>up</action>", "up", "up"),
    (f"{THINK}<action>move up</action>", "up", None),
    (f"{THINK}<action>Up.</action>", "up", None),
    (f"{THINK}<ACTION> LEFT </ACTION>", "left", "left"),
    (f"{THINK}<action>left</action> or else <action>right</action>", "left", "right"),  # two blocks
    (f"{THINK} I move up", None, None),  # no block
    (f"{THINK}<action>up", None, None),  # the block never closes
    (f"{THINK}<action>jump</action>", None, None),
    (f"{THINK}<action>go down, then up</action>", "up", None),  # verl's word order: up before down
    (f"{THINK}<action>still</action>", "still", None),  # verl's readable no-op
    ("</action><action>up</action>", None, "up"),  # verl: the first </action> comes first, an empty block
    ("up", "up", "up"),  # a bare action (score mode, the expert): the word itself
    (" Down ", "down", "down"),
    ("move up", None, None),
]


@pytest.mark.parametrize(("text", "verl", "strict"), EXAMPLES)
def test_read_move_as_verl_agent_and_strictly(text, verl, strict):
    assert read_move(text, "verl") == verl
    assert read_move(text, "strict") == strict


class ScriptedAnswers:
    """A text policy with the engine surface that gives the next answer of a script at every call."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = iter(answers)
        self.messages: list[str] = []

    def chat_prompt(self, text: str) -> list[int]:
        self.messages.append(text)
        return [len(self.messages) - 1]

    def generate(self, prompts, *, temperature, max_new_tokens, generator=None):
        return [Generation(p, [7], next(self.answers), False, [0.0]) for p in prompts]


def play(reading: str, answers: list[str]):
    env = SokobanEnvironment(action_reading=reading)
    model = ScriptedAnswers(answers)
    with EnvPool.from_environment(env) as pool:
        out = collect(model, pool, [TaskSpec("test", 0, 0, 0)],
                      RolloutSettings(max_steps=len(answers), history=4, temperature=1.0, max_new_tokens=64,
                                      success_reward=10.0, invalid_penalty=0.1),
                      generator=torch.Generator().manual_seed(0))
    return env, out, model.messages


def test_the_rollout_sends_whole_answers_and_sokoban_reads_them_as_verl_agent():
    env = SokobanEnvironment()
    level = env.puzzle("test", 0).level
    first, second = env.puzzle("test", 0).solution[:2]
    other = next(m for m in ("up", "down", "left", "right") if m != second)
    answers = [f"{THINK}<action>Move {first.capitalize()}.</action>", f"{THINK} I move {second}",
               f"{THINK}<action>{second}</action> or <action>{other}</action>", f"{THINK}<action>jump</action>"]
    env, out, messages = play("verl", answers)
    after = level.move(level.move(level.start, first), second)
    assert [r.state_key for r in out.rows] == [level.render(s) for s in
                                               (level.start, level.move(level.start, first),
                                                level.move(level.start, first), after)]
    assert [r.malformed for r in out.rows] == [False, True, False, False]  # only the answer without a block
    assert [r.penalty for r in out.rows] == [0.0, 0.1, 0.0, 0.0]
    # the history shows the moves read, and "still" for the answer that moved nothing
    assert f"[Action 1: {first}]" in messages[3] and "[Action 2: still]" in messages[3]
    assert f"[Action 3: {second}]" in messages[3]


def test_strict_reading_is_the_last_block_and_the_exact_word():
    env = SokobanEnvironment()
    level = env.puzzle("test", 0).level
    first = env.puzzle("test", 0).solution[0]
    other = next(m for m in ("up", "down", "left", "right") if m != first and level.move(level.start, m) is not None)
    answers = [f"{THINK}<action>Move {first}.</action>", f"{THINK}<action>{first}</action> <action>{other}</action>",
               f"{THINK}<action>{first}</action>"]
    _, out, messages = play("strict", answers)
    assert out.rows[1].state_key == level.render(level.start)  # "Move up." moved nothing
    assert out.rows[2].state_key == level.render(level.move(level.start, other))  # the last block
    assert f"[Action 1: Move {first}.]" in messages[2]  # the history shows the block, as before


def test_what_an_unreadable_answer_costs():
    episode = SokobanEnvironment().new_episode()
    start = episode.reset("test", 0)
    for text in (f"{THINK} no block", f"{THINK}<action>jump</action>", "<action>up"):
        step = episode.step(text)
        assert step.observation == start.observation and not step.valid and not step.done
        assert step.reward == pytest.approx(-0.1) and step.extra["action"] == "still"
    still = episode.step("<action>still</action>")
    assert still.valid and still.observation == start.observation and still.reward == pytest.approx(-0.1)


def test_the_option_is_checked():
    with pytest.raises(ValueError, match="action_reading must be one of verl, strict"):
        SokobanEnvironment(action_reading="loose")
