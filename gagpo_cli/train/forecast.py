"""How long a run will take: the up-front forecast, and the time left while it runs.

- ``forecast_run``: before the first iteration, a short calibration (``calibrate``: a few batched
  generations of the run's real first-turn prompt) measures the prompt pass and the decode step at
  two batch sizes; the run's budget is extrapolated from them (``Forecast``). It is an upper
  bound: every episode is assumed to use the whole step budget and every answer all
  ``max_new_tokens``. ``announce_forecast`` prints it.
- ``announce_eval_forecast``: the same calibration before ``gagpo eval`` of a generating model, and
  the evaluation's upper bound (every episode all its steps, every answer all its tokens).
- ``RunProgress``: the heartbeat and the iteration bar (``gagpo_cli.console``) of a training run from
  its first line to its last, with the time left: the work ahead (iterations and evaluations) priced
  by the forecast until units of each kind finished, then by their measured means, less what the
  unit in flight has already spent.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from gagpo_cli.agents import SlotView
from gagpo_cli.config import builtin_experiments
from gagpo_cli.console import Heartbeat, progress_bar
from gagpo_cli.episodes import choose_split
from gagpo_cli.train.distributed import Dist, agree_stop
from gagpo_cli.train.prompts import render_prompt

PROBE_TOKENS = 6  # decode steps timed per calibration batch
DECODE_ROWS = 8  # the larger batch of the decode-step fit
DECODE_PREFIX = 16  # prompt tokens kept for the decode-step probes
PROBE_FAST_S = 1.0  # double the calibration batch while one probe is faster than this
HINT_ABOVE_S = 3600.0  # suggest the CPU-sized experiments when a CPU run would take longer


def machine(device: Any) -> str:
    """``cpu, 2 cores`` or ``cuda, <GPU name>``."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda, {torch.cuda.get_device_name(device)}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{device.type}, {cores} core{'s' if cores != 1 else ''}"


@dataclass
class TurnCost:
    """What one generation turn costs here: the prompt pass, measured at ``rows`` rows of
    ``prompt_tokens`` tokens, and each further decode step of a batch of r rows,
    ``step_fixed_s + step_row_s * r`` (fitted on two batch sizes)."""

    rows: int
    prompt_tokens: int
    prefill_s: float  # generate(max_new_tokens=1) of ``rows`` copies of the prompt
    step_fixed_s: float
    step_row_s: float

    def turn_s(self, rows: int, new_tokens: int) -> float:
        """One turn of ``rows`` rows and ``new_tokens`` tokens: the prompt pass scaled by rows (it is
        compute-bound), plus the decode steps at that batch size."""
        step = self.step_fixed_s + self.step_row_s * rows
        return rows / self.rows * self.prefill_s + max(new_tokens - 1, 0) * step

    def forward_s(self, tokens: int) -> float:
        """A forward pass over ``tokens`` tokens, at the measured prompt-pass speed."""
        return self.prefill_s / (self.rows * self.prompt_tokens) * tokens


def _timed(engine: Any, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
    """(seconds, longest response) of one seeded generation."""
    began = time.perf_counter()
    out = engine.generate(prompts, temperature=1.0, max_new_tokens=new_tokens,
                          generator=torch.Generator().manual_seed(0))
    return time.perf_counter() - began, max((len(g.response_ids) for g in out), default=1)


def _step_s(engine: Any, prompt: list[int], rows: int) -> float:
    """Seconds per decode step of ``rows`` rows (1 + ``PROBE_TOKENS`` tokens minus the 1-token time)."""
    first, _ = _timed(engine, [prompt] * rows, 1)
    total, longest = _timed(engine, [prompt] * rows, 1 + PROBE_TOKENS)
    return max(total - first, 0.0) / max(longest - 1, 1)


def calibrate(engine: Any, prompt_ids: list[int], batch: int, *, fast_s: float = PROBE_FAST_S,
              ctx: Dist | None = None) -> TurnCost:
    """Measure ``engine.generate`` here (a few seconds; see ``TurnCost``).

    The prompt pass: copies of ``prompt_ids`` from 2 rows (1 if ``batch`` is 1), doubling up to
    ``batch`` while one pass takes under ``fast_s``. The decode step: a short prefix of the prompt
    (cheap to prefill) at 2 and ``min(batch, DECODE_ROWS)`` rows, 1 and 1 + ``PROBE_TOKENS`` tokens,
    after one warm-up call. Sampling uses its own generator and the global random states are
    restored, so a run's numbers do not depend on the calibration. Under torchrun (``ctx``) the ranks
    agree when to stop doubling (the first rank whose pass is slow enough stops them all): a sharded
    model's every ``generate`` is a collective, so every rank must make as many."""
    prompt = list(prompt_ids)
    short = prompt[:DECODE_PREFIX]
    with torch.random.fork_rng(devices=[]):
        _timed(engine, [short], 2)  # warm-up: first-call allocations are not the model's speed
        rows = min(batch, 2)
        while True:
            prefill, _ = _timed(engine, [prompt] * rows, 1)
            if agree_stop(rows >= batch or prefill >= fast_s, ctx or Dist()):
                break
            rows = min(batch, rows * 2)
        small, large = min(batch, 2), min(batch, DECODE_ROWS)
        step_small = _step_s(engine, short, small)
        step_large = _step_s(engine, short, large) if large > small else step_small
        step_large = max(step_large, step_small)  # more rows never decode faster (timing noise aside)
    per_row = max(step_large - step_small, 0.0) / (large - small) if large > small else 0.0
    fixed = max(step_small - per_row * small, 0.0)
    if large == small:  # one batch size only: all of it per row (the conservative reading)
        fixed, per_row = 0.0, step_small / small
    return TurnCost(rows, len(prompt), prefill, fixed, per_row)


@dataclass
class Forecast:
    """The run's remaining wall time, split by phase (seconds; upper bounds)."""

    iterations: int
    rollout_s: float
    update_s: float
    eval_s: float
    machine: str

    @property
    def total_s(self) -> float:
        return self.rollout_s + self.update_s + self.eval_s


def forecast_run(cfg: Any, cost: TurnCost, *, start: int, train_steps: int, eval_steps: int,
                 machine_name: str) -> Forecast:
    """Extrapolate ``cost`` to iterations ``start + 1 .. cfg.train.iterations``.

    Per iteration: ``train_steps`` turns of N x K rows and ``max_new_tokens`` tokens; the update
    runs (2 + b x epochs) forward-pass equivalents over every row's prompt + response (old and
    reference log-probs, then forward + backward per epoch; b = 2 with LoRA, whose frozen base needs
    no weight gradients, 3 for full fine-tuning). Evaluations: every ``eval_every``
    iterations and at the end, ``eval_episodes`` episodes in batches of N x K, ``eval_steps`` turns.
    """
    iters = max(cfg.train.iterations - start, 0)
    rows = cfg.rollout.tasks_per_batch * cfg.rollout.group_size
    new = cfg.rollout.max_new_tokens
    rollout = iters * train_steps * cost.turn_s(rows, new)
    tokens = rows * train_steps * (cost.prompt_tokens + new)
    passes = 2 + (2 if cfg.model.lora else 3) * cfg.optim.epochs
    update = iters * passes * cost.forward_s(tokens)
    evals = evaluations_ahead(cfg.train, start)
    batches = math.ceil(cfg.train.eval_episodes / rows) if cfg.train.eval_episodes else 0
    eval_rows = min(rows, cfg.train.eval_episodes or 1)
    evaluation = evals * batches * eval_steps * cost.turn_s(eval_rows, new)
    return Forecast(iters, rollout, update, evaluation, machine_name)


def evaluations_ahead(train: Any, start: int) -> int:
    """The evaluations a run with ``train`` settings (``TrainConfig``) plays from iteration ``start``
    on, as the recipe schedules them: the baseline (a fresh run with ``eval_every``), one after every
    ``eval_every``-th iteration, and the final one unless the schedule's last one is it (a run resumed
    after its last iteration plays the final one again). None without ``eval_episodes``."""
    if not train.eval_episodes:
        return 0
    every, iterations = train.eval_every, train.iterations
    scheduled = (iterations // every - start // every) if every and start < iterations else 0
    baseline = 1 if every and start == 0 else 0
    last_scheduled = bool(every) and iterations % every == 0 and start < iterations
    return baseline + scheduled + (0 if last_scheduled else 1)


def first_turn_prompt(engine: Any, pool: Any, split: str, history: int) -> list[int]:
    """The token ids of the first turn's prompt of task 0 of ``split`` (the environment is reset once)."""
    view = SlotView.start(0, pool.reset([(split, 0, 0)])[0])
    text = render_prompt(pool.environment_info.name, goal=view.goal, observation=view.observation,
                         admissible_actions=view.admissible_actions, history=[], step_count=0)
    return engine.chat_prompt(text)


def _hours(seconds: float) -> str:
    if seconds >= 100 * 3600:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{max(seconds, 1):.0f} s"


def describe(forecast: Forecast, cpu_experiments: list[str]) -> str:
    """The one-line forecast printed before a run: total, phases, and for a long CPU run a hint."""
    line = (f"forecast: about {_hours(forecast.total_s)} on this machine ({forecast.machine}) for "
            f"{forecast.iterations} "
            f"iteration(s): rollouts {_hours(forecast.rollout_s)}, updates {_hours(forecast.update_s)}, "
            f"evaluations {_hours(forecast.eval_s)} (an upper bound: every episode using all its steps, every "
            "answer all its tokens)")
    if forecast.machine.startswith("cpu") and forecast.total_s > HINT_ABOVE_S:
        names = " or ".join(f"`gagpo train {n}`" for n in cpu_experiments) or "`gagpo train quickstart`"
        line += f"; for a CPU try {names} (gagpo list experiments)"
    return line


def cpu_experiments() -> list[str]:
    """The built-in experiments sized for a CPU: quickstart and the lab-* ones, when shipped."""
    names = builtin_experiments()
    return [n for n in ("quickstart", *sorted(n for n in names if n.startswith("lab-"))) if n in names]


def announce_forecast(cfg: Any, engine: Any, pool: Any, *, start: int, device: Any,
                      say: Callable[[str], None] = print, ctx: Dist | None = None) -> Forecast | None:
    """Calibrate on the run's own model and first prompt, print ``describe``'s line, return the
    forecast; None (and a line saying so) when the engine cannot generate (score mode) or the run
    has nothing left to do."""
    if start >= cfg.train.iterations:
        return None
    if not hasattr(engine, "generate") or not hasattr(engine, "chat_prompt"):
        say("forecast: given after the first iteration (this action mode is not calibrated up front)")
        return None
    info = pool.environment_info
    split = choose_split(info, cfg.env.train_split, "env.train_split")
    prompt = first_turn_prompt(engine, pool, split, cfg.env.history)
    rows = cfg.rollout.tasks_per_batch * cfg.rollout.group_size
    cost = calibrate(engine, prompt, rows, ctx=ctx)
    forecast = forecast_run(cfg, cost, start=start, train_steps=cfg.env.max_steps or info.max_steps,
                       eval_steps=info.max_steps, machine_name=machine(device))
    say(describe(forecast, cpu_experiments()))
    return forecast


def announce_eval_forecast(agent: Any, pool: Any, split: str, *, episodes: int, batch_size: int, max_steps: int,
                           trials: int = 1, say: Callable[[str], None] = print) -> float | None:
    """Before a generating model agent's evaluation (``gagpo eval``): calibrate on its policy and first
    prompt, say the upper bound of the evaluation's time in one line and return it (seconds):
    ``trials`` plays (Reflexion's) of ``ceil(episodes / batch_size)`` batches of ``max_steps`` turns,
    each of ``min(batch_size, episodes)`` rows and the agent's ``max_new_tokens``. None, silently, when
    the policy cannot be calibrated (no ``generate`` or ``chat_prompt``)."""
    engine = agent.policy
    if not hasattr(engine, "generate") or not hasattr(engine, "chat_prompt"):
        return None
    rows = max(min(batch_size, episodes), 1)
    cost = calibrate(engine, first_turn_prompt(engine, pool, split, agent.history), rows)
    seconds = trials * math.ceil(episodes / max(batch_size, 1)) * max_steps * cost.turn_s(rows, agent.max_new_tokens)
    say(f"forecast: at most about {_hours(seconds)} on this machine ({machine(getattr(engine, 'device', 'cpu'))}) "
        f"for {episodes} episode(s) of up to {max_steps} steps and answers of up to {agent.max_new_tokens} tokens "
        "(an upper bound; --max-steps and --max-new-tokens lower it)")
    return seconds


class RunProgress:
    """What a training run shows from its first line to its last: the heartbeat (output not on a
    terminal; started on entry, before the model is loaded) and, from ``begin``, the iteration bar
    (terminal), with the time left.

    The time left prices the work ahead per unit: an iteration at the mean of the finished ones (their
    evaluations left out), before that the forecast's (rollouts + updates) / iterations; an evaluation
    at the mean of the finished ones, before that the forecast's evaluation time per evaluation, else
    an iteration's price. The unit in flight counts only the part of its price not yet spent, so the
    time left shrinks by a second every second of work and is re-priced only when a unit finishes.
    None (not printed) while nothing prices an iteration (no forecast, no iteration finished).
    ``clock`` (seconds, monotonic) times everything; ``period_s`` and ``stream`` go to the heartbeat.
    """

    def __init__(self, train: Any, *, clock: Callable[[], float] = time.monotonic,
                 period_s: float | None = None, stream: Any = None) -> None:
        self.total, self.start, self.done = train.iterations, 0, 0
        self.train = train
        self.forecast: Forecast | None = None
        self.evaluations = 0  # planned from ``begin``'s start
        self.evals_left = 0
        self._clock = clock
        self._heartbeat = Heartbeat("training (loading)", self.left_s, period_s=period_s, stream=stream, clock=clock)
        self._stack = contextlib.ExitStack()
        self._advance: Callable[[int], None] = lambda n=1: None
        self._mark: float | None = None  # when the iteration in flight began (None before ``begin``)
        self._evals_since_mark = 0.0  # evaluation time since then, not the iteration's
        self._eval_began: float | None = None
        self._iter_s, self._iters_timed = 0.0, 0
        self._eval_s, self._evals_timed = 0.0, 0

    def __enter__(self) -> RunProgress:
        self._stack.enter_context(self._heartbeat)
        return self

    def phase(self, what: str) -> None:
        """Name what runs before ``begin`` (loading the model, measuring the machine) in the heartbeat."""
        self._heartbeat.what = f"training ({what})"

    def begin(self, start: int, forecast: Forecast | None) -> None:
        """The work starts: iterations ``start + 1 ..`` and their evaluations (``evaluations_ahead``)."""
        self.start = self.done = start
        self.forecast = forecast
        self.evaluations = self.evals_left = evaluations_ahead(self.train, start)
        self._heartbeat.what = "training"
        self._advance = self._stack.enter_context(progress_bar("iterations", self.total))
        self._advance(start)
        self._mark = self._clock()

    def _iteration_price(self) -> float | None:
        if self._iters_timed:
            return self._iter_s / self._iters_timed
        forecast = self.forecast
        if forecast is None or not forecast.iterations:
            return None
        return (forecast.rollout_s + forecast.update_s) / forecast.iterations

    def _evaluation_price(self) -> float | None:
        if self._evals_timed:
            return self._eval_s / self._evals_timed
        if self.forecast is not None and self.evaluations:
            return self.forecast.eval_s / self.evaluations
        return self._iteration_price()

    def left_s(self) -> float | None:
        """Seconds left (the class docstring's pricing), None before ``begin`` or when unpriced."""
        iteration, evaluation = self._iteration_price(), self._evaluation_price()
        if self._mark is None or iteration is None or evaluation is None:
            return None
        now = self._clock()
        in_eval = now - self._eval_began if self._eval_began is not None else 0.0
        left = 0.0
        iters_left = self.total - self.done
        if iters_left > 0:  # the one in flight has spent its time since the mark, evaluations aside
            spent = now - self._mark - self._evals_since_mark - in_eval
            left += max(iteration - spent, 0.0) + (iters_left - 1) * iteration
        if self.evals_left > 0:
            left += max(evaluation - in_eval, 0.0) + (self.evals_left - 1) * evaluation
        return left

    @contextlib.contextmanager
    def evaluation(self) -> Iterator[None]:
        """An evaluation in flight: timed apart from the iterations, one fewer left once it ends
        (also when it fails: it is not played again in this run)."""
        self._eval_began = self._clock()
        try:
            yield
        finally:
            took = self._clock() - self._eval_began
            self._eval_began = None
            self._eval_s, self._evals_timed = self._eval_s + took, self._evals_timed + 1
            self._evals_since_mark += took
            self.evals_left = max(self.evals_left - 1, 0)

    def finished(self, iteration: int) -> None:
        """Iteration ``iteration`` is recorded (its scheduled evaluation included)."""
        now = self._clock()
        took = now - (self._mark if self._mark is not None else now) - self._evals_since_mark
        self._iter_s, self._iters_timed = self._iter_s + took, self._iters_timed + (iteration - self.done)
        self._advance(iteration - self.done)
        first = self.done == self.start
        self.done = iteration
        self._mark, self._evals_since_mark = now, 0.0
        if first and self.total > iteration:
            print(f"measured: {_hours(took)} for the first iteration here; about {_hours(self.left_s() or 0)} "
                  f"left for the other {self.total - iteration} iteration(s) and {self.evals_left} evaluation(s)",
                  flush=True)

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
