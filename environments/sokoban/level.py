"""Sokoban rules: a level (walls, targets, the starting boxes and player), moves, pushes, the text board.

Cells are numbered row-major (``row * cols + col``). A state is ``(player, boxes)``: the player's cell
and the frozenset of box cells. The border of every level is wall, so a move never leaves the grid.

A move (``up``, ``down``, ``left``, ``right``) walks the player one cell; walking into a box pushes it
one cell further when that cell is free floor. A move into a wall, or a push into a wall or another
box, changes nothing (gym-sokoban's rules, which verl-agent plays).

The board text is verl-agent's rendering of gym-sokoban rooms (its ``tiny_rgb_array`` text mode): each
cell is `` c \\t`` with the symbols below, rows are joined by newlines.
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIONS = ("up", "down", "left", "right")
_DELTAS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "√", "X", "P", "S"
_READ = {WALL: (True, False, False, False), FLOOR: (False, False, False, False),
         TARGET: (False, True, False, False), BOX_ON_TARGET: (False, True, True, False),
         BOX: (False, False, True, False), PLAYER: (False, False, False, True),
         PLAYER_ON_TARGET: (False, True, False, True), " ": (False, False, False, False)}  # (wall, target, box, player)

State = tuple[int, frozenset[int]]  # (player cell, box cells)


@dataclass(frozen=True)
class Level:
    """A Sokoban level: the fixed room and the starting state. As many targets as boxes."""

    rows: int
    cols: int
    walls: frozenset[int]
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int

    def __post_init__(self) -> None:
        if len(self.targets) != len(self.boxes) or not self.boxes:
            raise ValueError(f"a Sokoban level needs as many targets as boxes (at least one), got "
                             f"{len(self.targets)} target(s) and {len(self.boxes)} box(es)")
        border = {r * self.cols + c for r in range(self.rows) for c in range(self.cols)
                  if r in (0, self.rows - 1) or c in (0, self.cols - 1)}
        if not border <= self.walls:
            raise ValueError("a Sokoban level must be enclosed: every border cell must be a wall")
        if (self.boxes | self.targets | {self.player}) & self.walls or self.player in self.boxes:
            raise ValueError("a Sokoban level has a box, target or player on a wall, or the player on a box")

    @property
    def start(self) -> State:
        return self.player, self.boxes

    def offset(self, action: str) -> int:
        """The cell-number step of ``action`` (one of ``ACTIONS``)."""
        dr, dc = _DELTAS[action]
        return dr * self.cols + dc

    def move(self, state: State, action: str) -> State | None:
        """The state after ``action``, or None when it is blocked (into a wall, or a push into a wall/box)."""
        player, boxes = state
        d = self.offset(action)
        ahead = player + d
        if ahead in self.walls:
            return None
        if ahead not in boxes:
            return ahead, boxes
        beyond = ahead + d
        if beyond in self.walls or beyond in boxes:
            return None
        return ahead, (boxes - {ahead}) | {beyond}

    def solved(self, boxes: frozenset[int]) -> bool:
        return boxes == self.targets

    def render(self, state: State | None = None) -> str:
        """verl-agent's text board of ``state`` (default: the start)."""
        player, boxes = state if state is not None else self.start
        rows = []
        for r in range(self.rows):
            cells = []
            for c in range(self.cols):
                i = r * self.cols + c
                if i in self.walls:
                    symbol = WALL
                elif i == player:
                    symbol = PLAYER_ON_TARGET if i in self.targets else PLAYER
                elif i in boxes:
                    symbol = BOX_ON_TARGET if i in self.targets else BOX
                else:
                    symbol = TARGET if i in self.targets else FLOOR
                cells.append(f" {symbol} \t")
            rows.append("".join(cells))
        return "\n".join(rows)

    def describe(self, state: State | None = None) -> str:
        """The board of ``state`` (default: the start) in words, relative to the player: where each box
        and target lies ("1 up and 2 left") and which of the four neighbouring cells are wall. It names
        no other wall, so it shows less than ``render`` on any level where a box's path matters."""
        player, boxes = state if state is not None else self.start
        lines = [f"Box{'es' if len(boxes) > 1 else ''}: " + "; ".join(
            self._towards(player, box) + (" (on a target)" if box in self.targets else "") for box in sorted(boxes))]
        open_targets = sorted(self.targets - boxes - {player})
        if open_targets:
            lines.append(f"Target{'s' if len(open_targets) > 1 else ''}: "
                         + "; ".join(self._towards(player, target) for target in open_targets))
        if player in self.targets:
            lines.append("You stand on a target.")
        walled = [action for action in ACTIONS if player + self.offset(action) in self.walls]
        lines.append("Wall next to you: " + (", ".join(walled) if walled else "none"))
        return "\n".join(lines)

    def _towards(self, player: int, cell: int) -> str:
        """Where ``cell`` lies from ``player``: rows first, then columns ("2 up and 1 right")."""
        (row, col), (player_row, player_col) = divmod(cell, self.cols), divmod(player, self.cols)
        rows, cols = row - player_row, col - player_col
        steps = [f"{abs(rows)} {'down' if rows > 0 else 'up'}"] if rows else []
        steps += [f"{abs(cols)} {'right' if cols > 0 else 'left'}"] if cols else []
        return " and ".join(steps)

    @classmethod
    def parse(cls, text: str) -> Level:
        """A level from a board: either ``render``'s text or one character per cell (``#_OX√PS``, a space
        is floor). Raises ``ValueError`` naming the problem."""
        lines = [line for line in text.strip("\n").split("\n") if line.strip()]
        grid = [[cell.strip() for cell in line.rstrip("\t").split("\t")] if "\t" in line else list(line)
                for line in lines]
        if not grid or any(len(row) != len(grid[0]) for row in grid):
            raise ValueError("a Sokoban board must be a non-empty rectangle of cells")
        rows, cols = len(grid), len(grid[0])
        walls, targets, boxes, players = set(), set(), set(), []
        for r, row in enumerate(grid):
            for c, symbol in enumerate(row):
                if symbol not in _READ:
                    raise ValueError(f"unknown Sokoban symbol {symbol!r} at row {r}, column {c}")
                wall, target, box, player = _READ[symbol]
                i = r * cols + c
                walls |= {i} if wall else set()
                targets |= {i} if target else set()
                boxes |= {i} if box else set()
                players += [i] if player else []
        if len(players) != 1:
            raise ValueError(f"a Sokoban board needs exactly one player, found {len(players)}")
        return cls(rows, cols, frozenset(walls), frozenset(targets), frozenset(boxes), players[0])
