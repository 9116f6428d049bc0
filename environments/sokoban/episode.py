"""One Sokoban game behind the episode protocol (``environments.base.Episode``)."""

from __future__ import annotations

from environments.base import Episode, Reset, Step
from environments.sokoban import solver
from environments.sokoban.actions import STILL, read_move, shown_action
from environments.sokoban.generator import Puzzle
from environments.sokoban.level import ACTIONS, Level, State

TASK_TYPE = "sokoban"
_RULES = ("Move with up, down, left or right; walking into a box pushes it one cell if the cell beyond is "
          "free. Boxes cannot be pulled, so a box pushed into a corner off target can never move again.")
GOALS = {  # by the observation's form (the ``render`` option)
    "grid": ("Push every box (X) onto a target (O); the puzzle is solved when all boxes are on targets (√). "
             "Board symbols: # wall, _ floor, O target, X box, √ box on target, P you, S you on a target. " + _RULES),
    "words": ("Push every box onto a target; the puzzle is solved when all boxes are on targets. The board is "
              "described from where you stand: how many cells up, down, left or right each box and target "
              "lies, and which cells next to you are wall. " + _RULES),
}

# gym-sokoban's rewards (what verl-agent trains on): per step, box onto / off a target, all boxes placed
STEP_PENALTY, BOX_ON, BOX_OFF, FINISHED = -0.1, 1.0, -1.0, 10.0


class SokobanEpisode(Episode):
    """One level. ``seed`` has no effect: a level is fixed by ``(split, task_id)``.

    ``step`` reads its text by ``reading`` (``actions.read_move``: ``verl``, verl-agent's reading of a
    whole answer, or ``strict``) and reports in ``extra["action"]`` what the agent's history shows in
    place of the text (``actions.shown_action``: under ``verl`` the move read, ``still`` when unreadable,
    as verl-agent's history shows its action names). What an unreadable text costs: the step (one of the episode's
    ``max_steps``), the per-step reward (-0.1 under ``shaped``), the board left as it is, ``valid``
    False; verl-agent's wrapper likewise does not step the game and returns -0.1. ``still`` (``verl``
    only) is the same no-op read as intended: ``valid`` True, as verl-agent marks it. A move that is
    blocked (into a wall, or pushing a box into a wall or box) spends the step and leaves the board as
    it is (``valid`` False, ``extra["blocked"]`` True; verl-agent calls it valid). The invalid-action
    penalty is the rollout's, not the environment's. The episode is done when every box is on a target
    (``won``, ``score`` 1).

    ``reward``: ``shaped`` gives gym-sokoban's per-step reward (-0.1 a step, +1 / -1 for a box pushed
    onto / off a target, +10 on the solving step); ``success`` gives 1.0 on the solving step, else 0.
    ``admissible``: ``all`` lists the four moves in every state (as verl-agent's prompt does), ``effective``
    only the moves that change the board (all four again when none does: the player is walled in).
    """

    def __init__(self, puzzle_of, reward: str, admissible: str, reading: str = "verl", render: str = "grid") -> None:
        self._puzzle_of = puzzle_of  # (split, task_id) -> Puzzle
        self._render = render
        self._reward = reward
        self._reading = reading
        self._admissible_mode = admissible
        self._level: Level | None = None
        self._state: State | None = None
        self._plan: dict[State, str] = {}  # the expert's next move in each state of its current plan

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        puzzle: Puzzle = self._puzzle_of(split, task_id)
        self._level, self._state = puzzle.level, puzzle.level.start
        self._plan = self._follow(puzzle.level.start, puzzle.solution)
        board = self._level.render(self._state)
        return Reset(observation=self._shown(board), admissible_actions=self._admissible(), task_type=TASK_TYPE,
                     state_key=board, goal=GOALS[self._render], task_id=task_id)

    def step(self, action: str) -> Step:
        level, state = self._require()
        word = read_move(action, self._reading)
        moved = level.move(state, word) if word in ACTIONS else None
        before = len(state[1] & level.targets)
        if moved is not None:
            self._state = moved
        player, boxes = self._state
        after = len(boxes & level.targets)
        won = level.solved(boxes)
        if self._reward == "shaped":
            reward = STEP_PENALTY + (BOX_ON if after > before else BOX_OFF if after < before else 0.0)
            reward += FINISHED if won else 0.0
        else:
            reward = 1.0 if won else 0.0
        board = level.render(self._state)
        return Step(observation=self._shown(board), reward=reward, done=won, won=won, score=1.0 if won else 0.0,
                    valid=moved is not None or word == STILL, admissible_actions=self._admissible(),
                    state_key=board, extra={"boxes_on_target": after, "blocked": word in ACTIONS and moved is None,
                                            "action": shown_action(action, self._reading, word)})

    def expert_action(self) -> str:
        """The next move of a shortest solution from the current state (re-planned when the state left
        the plan); the first admissible move when no solution exists (a deadlock)."""
        level, state = self._require()
        if state not in self._plan:
            self._plan = self._follow(state, solver.solve(level, state) or ())
        return self._plan.get(state, self._admissible()[0])

    def _follow(self, state: State, moves: tuple[str, ...]) -> dict[State, str]:
        """Each state along ``moves`` from ``state``, mapped to the move taken there."""
        level, plan = self._level, {}
        for move in moves:
            plan[state] = move
            state = level.move(state, move)
        return plan

    def _shown(self, board: str) -> str:
        """The observation: the text board itself (``grid``) or the board in words (``words``)."""
        level, state = self._require()
        return board if self._render == "grid" else level.describe(state)

    def _admissible(self) -> tuple[str, ...]:
        level, state = self._require()
        if self._admissible_mode == "all":
            return ACTIONS
        return tuple(a for a in ACTIONS if level.move(state, a) is not None) or ACTIONS

    def _require(self) -> tuple[Level, State]:
        if self._level is None or self._state is None:
            raise RuntimeError("call reset() before step() or expert_action()")
        return self._level, self._state
