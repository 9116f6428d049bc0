"""The prompting baselines of Table 1: a language model acting without training.

``gagpo eval --policy MODEL --agent NAME``:

- ``plain``: the rollout's own prompt (``train.prompts.render_prompt``), the model as it is trained;
- ``react``: ReAct (Yao et al. 2023, arXiv 2210.03629): a thought then the action, the thoughts kept
  in the history window (``react.ReactAgent``);
- ``reflexion``: Reflexion (Shinn et al. 2023, arXiv 2303.11366): the ReAct agent replays each failed
  task up to ``trials`` times, with its self-reflections on the earlier failures in the prompt
  (``reflexion.run_trials``).

The prompting agents need a model that writes text (generate mode): a score-mode run (and a policy
kind that only scores, such as ``bow-mlp``: ``writes_text`` in ``train/policies/kinds.py``) has no
thoughts to write.
"""

from __future__ import annotations

from typing import Any

from gagpo_cli.errors import UsageError
from gagpo_core.plugins import unknown_name_message

AGENT_NAMES = ("plain", "react", "reflexion")
# Reflexion's ALFWorld and WebShop settings (noahshinn/reflexion, alfworld_runs/run_reflexion.sh and
# webshop_runs/run_reflexion.sh: 10 trials; alfworld_trial.py and generate_reflections.py: the last
# 3 reflections go into the prompts)
DEFAULT_TRIALS = 10
DEFAULT_MEMORY = 3


def check_agent(name: str, *, trials: int = DEFAULT_TRIALS, memory: int = DEFAULT_MEMORY) -> None:
    """An unknown agent name (with the closest one) or a bad Reflexion setting is a ``UsageError``."""
    if name not in AGENT_NAMES:
        raise UsageError(unknown_name_message("agent", name, list(AGENT_NAMES)))
    if trials < 1:
        raise UsageError(f"--trials must be at least 1, got {trials}")
    if memory < 0:
        raise UsageError(f"--memory must be 0 or more, got {memory}")


def check_generates(name: str, action_mode: str, model_name: str = "") -> None:
    """``--agent react|reflexion`` needs a model in generate mode; anything else is a ``UsageError``."""
    if name == "plain" or action_mode != "score":
        return
    from gagpo_cli.train.policies.kinds import policy_kind

    refusal = policy_kind(model_name).mode_refusal("generate")
    what = refusal or "this run ranks admissible actions (rollout.action_mode=score)"
    raise UsageError(f"--agent {name} needs a model that writes its thoughts, but {what}: use --agent plain")


def prompting_agent(name: str, policy: Any) -> Any:
    """The agent ``name`` acting with the loaded model agent ``policy`` (``train.acting.agent.ModelAgent``);
    ``plain`` is ``policy`` itself. A policy without a model (expert, random) is a ``UsageError``."""
    if name == "plain":
        return policy
    if not hasattr(policy, "policy") or not hasattr(policy, "action_mode"):
        raise UsageError(
            f"--agent {name} prompts a language model; policy '{policy.name}' is not one "
            "(give a model folder, hub id or run directory)"
        )
    check_generates(name, policy.action_mode, getattr(policy, "model_name", ""))
    from gagpo_cli.prompting.react import ReactAgent

    return ReactAgent(policy)
