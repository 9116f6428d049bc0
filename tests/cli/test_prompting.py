"""``gagpo eval --agent plain | react | reflexion``: the ReAct prompt and its thoughts, Reflexion's
memory across trials, the records, ``plain`` unchanged, and the command's bad input.

The ReAct and Reflexion tests drive the agents with ``ScriptedModel``, a deterministic text policy
with the engine surface (``chat_prompt``, ``generate``) whose answers follow from the prompt, so the
prompts and memories the agents build can be checked step by step; the plain and command-line tests
use the tiny random transformers model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from envs import run_gagpo
from envs.corridor import CorridorEnvironment
from support import run_cli
from tiny_model import tiny_model, tiny_policy, tiny_tokenizer

from environments.pool import EnvPool
from gagpo_cli.episodes import EpisodeRecord, evaluation_specs, play_episodes, run_episodes
from gagpo_cli.errors import UsageError
from gagpo_cli.evaluate import evaluate
from gagpo_cli.prompting import prompting_agent
from gagpo_cli.prompting.react import ReactAgent, audit_steps, read_answer, thought_only_action
from gagpo_cli.prompting.reflexion import run_trials
from gagpo_cli.train.acting.agent import ModelAgent
from gagpo_cli.train.policies.lm_generate import Generation
from gagpo_cli.train.prompts import THOUGHT_ONLY, parse_thought, render_react_prompt


class ScriptedModel:
    """Answers each user message with ``answer(message)``; keeps every message it was shown."""

    def __init__(self, answer: Callable[[str], str]) -> None:
        self.answer = answer
        self.messages: list[str] = []

    def chat_prompt(self, text: str) -> list[int]:
        self.messages.append(text)
        return [len(self.messages) - 1]

    def generate(self, prompts, *, temperature, max_new_tokens, generator=None):
        return [Generation(p, [], self.answer(self.messages[p[0]]), False) for p in prompts]


def scripted_agent(answer: Callable[[str], str], history: int = 2) -> tuple[ModelAgent, ScriptedModel]:
    model = ScriptedModel(answer)
    return ModelAgent(
        model,
        name="scripted",
        history=history,
        temperature=0.4,
        max_new_tokens=64,
        model_name="org/Scripted-1B",
    ), model


def tiny_agent() -> ModelAgent:
    """The tiny random transformers model as a model agent (fresh, seeded)."""
    return ModelAgent(tiny_policy(), name="tiny", history=2, temperature=0.4, max_new_tokens=8, model_name="tiny")


def current_step(message: str) -> int:
    return int(re.search(r"Current observation \(step (\d+)\)", message).group(1))


# ---------------------------------------------------------------------------- ReAct


def test_react_prompt_shows_thoughts_thought_only_steps_and_reflections():
    text = render_react_prompt(
        "corridor",
        goal="Your task is to: go to the attic.",
        observation="You are in the hall.",
        admissible_actions=("look", "go east"),
        step_count=5,
        history=[("obs four", "the attic is east", "go east"), ("obs five", "plan more", None)],
        reflections=[(1, "go east first")],
    )
    assert "[Observation 4: obs four]\n[Thought 4: the attic is east]\n[Action 4: go east]" in text
    assert f"[Observation 5: obs five]\n[Thought 5: plan more]\n[Action 5: {THOUGHT_ONLY}]" in text
    assert "[Attempt 1: go east first]" in text and "Your task is to: go to the attic." in text
    assert (
        text.index("[Attempt 1") < text.index("[Observation 4") < text.index("Current observation (step 6)")
    )
    assert "Admissible actions: ['look', 'go east']" in text and text.endswith(
        "nothing changes in the environment."
    )
    assert "Attempt" not in render_react_prompt(
        "corridor", goal="g", observation="o", admissible_actions=(), history=[], step_count=0
    )


@pytest.mark.parametrize(
    ("answer", "thought", "sent"),
    [
        ("<think>east is closer</think><action>go east</action>", "east is closer", "go east"),
        ("think: I must find the key first", "I must find the key first", "think: I must find the key first"),
        ("<think>plan only</think>", "plan only", "think: plan only"),
        ("<action>look</action>", "", "look"),
        ("no format at all", "", "no format at all"),
    ],
)
def test_read_answer(answer, thought, sent):
    assert read_answer(answer) == (thought, sent)
    assert parse_thought(answer) == thought


def test_react_keeps_each_steps_thought_in_the_history_window():
    agent, model = scripted_agent(
        lambda m: f"<think>thought at step {current_step(m)}</think><action>look</action>"
    )
    pool = EnvPool.from_environment(CorridorEnvironment())
    views, _, _ = play_episodes(pool, ReactAgent(agent), [("train", 0, 0), ("train", 1, 0)], max_steps=5)
    fifth = [m for m in model.messages if current_step(m) == 5]
    assert len(fifth) == 2
    for message in fifth:  # the window of 2: steps 3 and 4 with their thoughts, nothing older
        assert "[Thought 3: thought at step 3]\n[Action 3: look]" in message
        assert "[Thought 4: thought at step 4]\n[Action 4: look]" in message
        assert "Thought 2" not in message and "Observation 2" not in message
    assert audit_steps(views[0]) == [
        {"thought": f"thought at step {k}", "action": "look"} for k in range(1, 6)
    ]


def test_a_thought_only_answer_is_a_step_the_environment_answers_with_its_no_op():
    def answer(message: str) -> str:
        return "<think>let me plan</think>" if current_step(message) == 1 else "<action>look</action>"

    agent, model = scripted_agent(answer)
    pool = EnvPool.from_environment(CorridorEnvironment())
    (view,), env_steps, _ = play_episodes(pool, ReactAgent(agent), [("train", 0, 0)], max_steps=3)
    assert env_steps == 3 and len(view.history) == 3
    assert view.history[0][1] == thought_only_action("let me plan") == "think: let me plan"
    second = [m for m in model.messages if current_step(m) == 2][0]
    assert f"[Thought 1: let me plan]\n[Action 1: {THOUGHT_ONLY}]" in second
    assert "Current observation (step 2): Nothing happens." in second  # the environment's no-op


# ---------------------------------------------------------------------------- Reflexion


def sweeping_actor(message: str) -> str:
    """Walks east to the end of the corridor, then west (reaches every room) once at least two
    reflections are shown; before that it only looks."""
    if "[Attempt 2:" not in message:
        return "<think>I will look around</think><action>look</action>"
    actions = re.findall(r"\[Action \d+: ([^\]]*)\]", message)
    admissible = re.search(r"Admissible actions: \[(.*)\]", message).group(1)
    if (actions and actions[-1] == "go west" or "'go east'" not in admissible) and "'go west'" in admissible:
        return "<action>go west</action>"
    return "<action>go east</action>"


def reflecting(message: str) -> str:
    """A reflection naming the task and how many plans it was shown; else the sweeping actor."""
    if "did not complete it" not in message:
        return sweeping_actor(message)
    task = re.search(r"Your task was to: (.*)", message).group(1)
    shown = len(re.findall(r"\[Attempt \d+:", message))
    steps = re.search(r"Your attempt \((\d+) step", message).group(1)
    return f"<think>why</think>plan for '{task}' after {steps} steps, seeing {shown} plans"


def test_reflexion_memory_is_per_task_bounded_and_reaches_the_next_trial():
    agent, model = scripted_agent(reflecting)
    pool = EnvPool.from_environment(CorridorEnvironment())
    specs = evaluation_specs(pool, "test", 4, seed=0)
    records, logs, per_trial, env_steps, _ = run_trials(
        pool, ReactAgent(agent), specs, trials=4, memory=2, max_steps=20
    )
    types = [r.task_type for r in records]
    assert sorted(types) == ["fetch", "fetch", "reach", "reach"]
    # reach tasks are solved at trial 3 (the first with two reflections); fetch tasks never
    for record, log in zip(records, logs, strict=True):
        assert [t["trial"] for t in log] == ([1, 2, 3] if record.task_type == "reach" else [1, 2, 3, 4])
        assert record.won == (record.task_type == "reach") and record == EpisodeRecord(
            **{k: v for k, v in log[-1].items() if k not in ("trial", "steps", "reflection")}
        )
        assert all(t["reflection"] for t in log[:-1]) and log[-1]["reflection"] == ""  # none after the last
        assert (
            log[0]["reflection"]
            == f"plan for '{goal_of(pool, specs, record)}' after 20 steps, seeing 0 plans"
        )
        assert log[1]["reflection"].endswith("seeing 1 plans")
        assert [len(t["steps"]) for t in log[:2]] == [20, 20] and log[0]["steps"][0][
            "thought"
        ] == "I will look around"
    assert [t["won"] for t in per_trial] == [0, 0, 2, 0] and [t["played"] for t in per_trial] == [4, 4, 4, 2]
    assert [t["success_rate"] for t in per_trial] == [0.0, 0.0, 50.0, 50.0]
    assert env_steps == sum(t["length"] for log in logs for t in log)
    # every actor prompt shows only its own task's reflections, the last two, in order
    for message in model.messages:
        if "did not complete it" in message:
            continue
        task = re.search(r"Your task is to: (.*)", message).group(1)
        shown = re.findall(r"\[Attempt (\d+): plan for '(.*)' after \d+ steps, seeing (\d+) plans\]", message)
        assert all(t == task for _, t, _ in shown) and len(shown) <= 2
        assert [int(n) for n, _, _ in shown] == list(range(1, len(shown) + 1))
    fourth = [m for m in model.messages if "seeing 2 plans" in m and "did not complete" not in m]
    assert fourth and all("seeing 0 plans" not in m for m in fourth)  # trial 4 shows trials 2 and 3 only


def goal_of(pool: EnvPool, specs, record) -> str:
    (reset,) = pool.reset([next(s for s in specs if s[1] == record.task_id)])
    return reset.goal.removeprefix("Your task is to: ")


def test_evaluate_records_name_the_agent_and_keep_thoughts_and_reflections(plugin):
    agent, _ = scripted_agent(reflecting)
    react = evaluate("corridor", agent, episodes=2, split="test", agent="react", max_steps=3)
    assert react["agent"] == "react" and react["model"] == "org/Scripted-1B" and "run" not in react
    assert all(
        e["steps"][0] == {"thought": "I will look around", "action": "look"} for e in react["per_episode"]
    )
    agent, _ = scripted_agent(reflecting)
    result = evaluate(
        "corridor", agent, episodes=2, split="test", agent="reflexion", trials=2, memory=3, max_steps=3
    )
    assert result["agent"] == "reflexion" and result["trials"] == 2 and result["memory"] == 3
    assert [t["trial"] for t in result["per_trial"]] == [1, 2]
    assert all(
        len(e["trials"]) == 2 and e["trials"][0]["reflection"].startswith("plan for")
        for e in result["per_episode"]
    )
    json.dumps(result)  # the eval JSON


# ---------------------------------------------------------------------------- plain, bad input


def test_plain_agent_gives_the_records_of_the_model_agent_itself():
    pool = EnvPool.from_environment(CorridorEnvironment())
    specs = evaluation_specs(pool, "test", 2, seed=0)
    records, _, _ = run_episodes(pool, tiny_agent(), specs, max_steps=4)
    agent = tiny_agent()
    assert prompting_agent("plain", agent) is agent
    again, _, _ = run_episodes(pool, prompting_agent("plain", agent), specs, max_steps=4)
    assert again == records


def test_score_mode_and_models_without_text_are_refused():
    agent, _ = scripted_agent(reflecting)
    agent.action_mode = "score"
    with pytest.raises(
        UsageError, match="--agent react needs a model that writes its thoughts.*action_mode=score"
    ):
        prompting_agent("react", agent)
    agent.model_name = "bow-mlp"
    with pytest.raises(UsageError, match="bow-mlp only ranks admissible actions"):
        prompting_agent("reflexion", agent)


def test_engine_hf_acts_exactly_as_the_models_own_generation():
    from gagpo_cli.train.acting.agent import with_engine
    from gagpo_cli.train.acting.engines.hf import HFEngine

    pool = EnvPool.from_environment(CorridorEnvironment())
    specs = evaluation_specs(pool, "test", 2, seed=0)
    own, _, _ = run_episodes(pool, ReactAgent(tiny_agent()), specs, max_steps=3)
    agent = with_engine(tiny_agent(), "hf")
    assert isinstance(agent.policy, HFEngine)
    through_engine, _, _ = run_episodes(pool, ReactAgent(agent), specs, max_steps=3)
    assert through_engine == own
    agent.action_mode = "score"
    with pytest.raises(UsageError, match="--engine vllm: this run ranks admissible actions"):
        with_engine(agent, "vllm")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "Tiny-Instruct"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def score_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "bow"
    run.mkdir()
    (run / "config.yaml").write_text(
        "model:\n  name: bow-mlp\nrollout:\n  action_mode: score\nenv:\n  name: corridor\n"
    )
    return run


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--agent", "reac"], "unknown agent 'reac'. Did you mean 'react'?"),
        (["--agent", "react"], "--agent react prompts a language model; policy 'expert' is not one"),
        (["--agent", "reflexion", "--trials", "0"], "--trials must be at least 1, got 0"),
        (["--agent", "reflexion", "--memory", "-1"], "--memory must be 0 or more, got -1"),
        (
            ["--agent", "react", "--policy", "SCORE_RUN"],
            "bow-mlp only ranks admissible actions: use --agent plain",
        ),
        (["--engine", "hf"], "--engine generates a language model's answers; policy 'expert' is not one"),
        (
            ["--engine", "vlm", "--policy", "SCORE_RUN"],
            "unknown --engine 'vlm'. Did you mean 'vllm'? Valid names: auto, hf, vllm",
        ),
    ],
)
def test_cli_bad_agent_input_is_one_line_exit_2(plugin, score_run, args, expected):
    args = [str(score_run) if a == "SCORE_RUN" else a for a in args]
    proc = run_gagpo(["eval", "--env", "corridor", *args], plugin)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_engine_vllm_without_vllm_names_the_setup_line(plugin, tiny_folder):
    from gagpo_cli.train.acting.engines import VLLM_SETUP, vllm_problem

    if vllm_problem() is None:
        pytest.skip("vLLM is installed here")
    proc = run_gagpo(
        ["eval", "--env", "corridor", "--policy", str(tiny_folder), "--agent", "react", "--engine", "vllm"],
        plugin,
    )
    assert proc.returncode == 2 and VLLM_SETUP in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_cli_reflexion_with_a_model_folder_writes_trials_and_reflections(plugin, tiny_folder, tmp_path):
    out = tmp_path / "reflexion.json"
    code, stdout, stderr = run_cli(
        [
            "eval",
            "--env",
            "corridor",
            "--policy",
            str(tiny_folder),
            "--agent",
            "reflexion",
            "--trials",
            "2",
            "--episodes",
            "1",
            "--option",
            "max_steps=2",  # the model writes up to 512 tokens a step: a short trial keeps the test quick
            "--json",
            str(out),
        ]
    )
    assert code == 0, stderr
    assert "Reflexion: success after each trial" in stdout
    result = json.loads(out.read_text())
    assert result["agent"] == "reflexion" and result["model"] == str(tiny_folder) and result["trials"] == 2
    (episode,) = result["per_episode"]
    assert len(result["per_trial"]) == len(episode["trials"]) == (1 if episode["won"] else 2)
    assert all(len(t["steps"]) == t["length"] <= 2 for t in episode["trials"])  # the budget given
    # a reflection after each failed trial but the last (it would never be read)
    assert all(t["reflection"] for t in episode["trials"][:-1]) and episode["trials"][-1]["reflection"] == ""


# ---------------------------------------------------------------------------- gagpo report


def write_eval(path, agent, env, success, score, *, seed=0, model="Qwen/Qwen2.5-1.5B-Instruct", **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    per_type = {"pick": success, "look": success / 2} if env == "alfworld" else {}
    path.write_text(
        json.dumps(
            {
                "env": env,
                "split": "test",
                "policy": model,
                "seed": seed,
                "agent": agent,
                "model": model,
                "success_rate": success,
                "score": score,
                "per_type": per_type,
                "episodes": 4,
                "per_episode": [],
                **extra,
            }
        )
    )


def test_report_places_prompting_evaluations_as_table1_rows(tmp_path):
    import yaml

    from gagpo_cli.report.command import build_table
    from gagpo_cli.report.runs import load_runs

    root = tmp_path / "results"
    run = root / "grpo-alf" / "s0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "estimator": {"name": "grpo"},
                "env": {"name": "alfworld"},
                "model": {"name": "Qwen/Qwen2.5-1.5B-Instruct"},
                "train": {"seed": 0},
            }
        )
    )
    (run / "eval.json").write_text(json.dumps({"success_rate": 70.0, "score": 70.0, "per_type": {}}))
    write_eval(run / "react-again.json", "react", "alfworld", 1.0, 1.0)  # inside a run directory: not read
    write_eval(root / "prompting" / "react-alf-s0.json", "react", "alfworld", 10.0, 10.0, seed=0)
    write_eval(root / "prompting" / "react-alf-s1.json", "react", "alfworld", 20.0, 20.0, seed=1)
    write_eval(root / "prompting" / "plain-ws.json", "plain", "webshop", 5.0, 23.0)
    write_eval(
        root / "prompting" / "reflexion-ws.json", "reflexion", "webshop", 21.0, 55.0, trials=10, memory=3
    )
    write_eval(
        root / "prompting" / "trained.json", "react", "alfworld", 99.0, 99.0, run="s0"
    )  # a trained run
    (root / "prompting" / "notes.json").write_text(json.dumps({"anything": 1}))
    runs, warnings = load_runs([root])
    assert warnings == [] and len(runs) == 5
    table = build_table([r for r in runs if r.evaluation], 1, paper=True)
    measured = [r for r in table.rows if r.kind == "measured"]
    assert [r.label for r in measured] == ["Qwen2.5-1.5B-Instruct (prompting)", "ReAct", "Reflexion", "GRPO"]
    react = measured[1]
    assert react.stats["ALFWorld All"].mean == 15.0 and react.stats["ALFWorld All"].n == 2
    assert react.stats["ALFWorld Pick"].mean == 15.0 and react.stats["ALFWorld Look"].mean == 7.5
    assert measured[2].stats["WebShop Score"].mean == 55.0 and measured[0].stats["WebShop Succ."].mean == 5.0
    published = [r.label for r in table.rows if r.kind == "published" and r.block == "Qwen2.5-1.5B-Instruct"]
    assert published[:5] == [
        "GPT-4o (prompting)",
        "Gemini-2.5-Pro (prompting)",
        "Qwen2.5 (prompting)",
        "ReAct",
        "Reflexion",
    ]
    # one file given directly is enough; a corrupt evaluation is named and left out
    (root / "prompting" / "broken.json").write_text(
        json.dumps({"agent": "react", "model": "m", "env": "webshop", "success_rate": "high"})
    )
    runs, warnings = load_runs([root / "prompting" / "plain-ws.json"])
    assert [r.config["prompting"]["agent"] for r in runs] == ["plain"] and warnings == []
    runs, warnings = load_runs([root / "prompting"])
    assert len(runs) == 4 and len(warnings) == 1 and "broken.json" in warnings[0]


def test_cli_an_engine_failure_is_one_line_exit_1(plugin, tiny_folder, monkeypatch):
    """An engine that fails while generating is a failure of the run, not of the input: exit 1, one line."""
    from gagpo_cli.train.acting.engines import EngineError
    from gagpo_cli.train.acting.engines.hf import HFEngine

    def failing(self, *args, **kwargs):
        raise EngineError("rollout engine 'hf' failed while generating: backend died")

    monkeypatch.setattr(HFEngine, "generate", failing)
    code, _, stderr = run_cli(["eval", "--env", "corridor", "--policy", str(tiny_folder), "--agent", "react",
                               "--engine", "hf", "--episodes", "1", "--option", "max_steps=1"])
    assert code == 1 and "rollout engine 'hf' failed while generating: backend died" in stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
