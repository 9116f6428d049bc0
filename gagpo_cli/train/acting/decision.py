"""What one turn of acting produced for one live episode, in either action mode.

A ``Decision`` holds what every mode shares (the action, the text sent to the environment, its
length) and one typed record of how the action was taken: ``Generated`` (generate mode: the prompt,
the sampled response and its tokens' log-probs) or ``Ranked`` (score mode: the scored candidates,
the index drawn and its log-prob). The log-probs named ``rollout_*`` are the ones the rollout sampled
with; the update computes its own (pi_old) before it steps and compares the two
(``actor/rollout_probs_diff_*``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gagpo_cli.train.policies.scoring import ScoreInput


@dataclass(slots=True)  # no per-instance dict: thousands live through each iteration
class Generated:
    """Generate mode: the model wrote the action."""

    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float] | None  # log pi_T of each response token as sampled (None: not reported)

    @property
    def generated_tokens(self) -> int:
        return len(self.response_ids)


@dataclass(slots=True)
class Ranked:
    """Score mode: the policy drew one of the admissible actions from softmax(scores / T)."""

    score_input: ScoreInput | None  # the candidates scored; None: there was none (the step takes no part)
    choice: int  # index into score_input.candidates; -1 when there was none
    rollout_logp: float  # log pi_T(choice | s) as sampled (0.0 when there was none)

    @property
    def generated_tokens(self) -> int:
        return 0


@dataclass(slots=True)
class Decision:
    """The policy's answer for one live episode."""

    action: str | None  # the action taken; None: malformed (no <action> tags, or nothing to choose from)
    sent: str  # what the environment receives: the action, or the clipped raw output / a no-op
    acted: Generated | Ranked  # how the action was taken
    truncated: bool  # the response hit max_new_tokens (score mode: never)
    length: int  # StepBatch.response_lengths: response tokens (score mode: the chosen action's length)
    entropy: float | None  # at the rollout temperature (generate mode: None, computed later if needed)
