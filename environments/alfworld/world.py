"""The embedded ALFWorld engine: the state of one game, the command grammar of alfworld 0.4
(``alfred.twl2`` + ``alfred.pddl``), its feedback texts and its admissible commands.

Preconditions follow ``alfred.pddl``: take needs empty hands and an open (or non-openable)
receptacle; move needs ``canContain`` and an open receptacle; heat/cool/clean need the held object
to be heatable/coolable/cleanable and the agent at a microwave/fridge/sinkbasin; ``use`` toggles a
lamp at the agent's receptacle (``isToggled`` stays true, so the feedback is always "You turn on").
Commands are matched exactly after stripping surrounding whitespace (the real engine is
case-sensitive); anything else is "Nothing happens." and invalid. As in the real engine, going to
the receptacle the agent is at, and examining an object that is not held, are not possible.
"""

from __future__ import annotations

from bisect import insort

from environments.alfworld import catalog
from environments.alfworld.generator import Game

NOTHING_HAPPENS = "Nothing happens."
WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
MAX_COMMAND_CHARS = 200  # no valid command is longer; longer input is rejected before parsing


def listing(items: list[str]) -> str:
    """TextWorld's list phrasing: "nothing", "a x", "a x, and a y", "a x, a y, and a z"."""
    if not items:
        return "nothing"
    words = [f"a {name}" for name in items]
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + ", and " + words[-1]


class World:
    """Mutable state of one game. ``reset`` restores the start; ``act`` applies one command."""

    def __init__(self, game: Game) -> None:
        self.game = game
        g = game
        self._rec_index = {name: i for i, name in enumerate(g.receptacles)}
        self._obj_index = {name: i for i, name in enumerate(g.objects)}
        self.openable = tuple(rt in catalog.OPENABLE for rt in g.receptacle_types)
        self._accepts = tuple(catalog.CAN_CONTAIN[rt] for rt in g.receptacle_types)
        self._lamp = tuple(t == catalog.LAMP for t in g.object_types)
        self._goto = tuple(f"go to {name}" for name in g.receptacles)
        self._always = sorted((*self._goto, "inventory", "look"))  # offered everywhere (but "go to" here)
        self._targets = tuple(rec for rec, rt in enumerate(g.receptacle_types) if rt == g.target_recep)
        # Room listing: types alphabetical, numbers descending (as alfworld's demangled ids read).
        room_order = sorted(range(len(g.receptacles)),
                            key=lambda i: (g.receptacle_types[i], -int(g.receptacles[i].rsplit(" ", 1)[1])))
        self._room = ("You are in the middle of a room. Looking quickly around you, you see "
                      + listing([g.receptacles[i] for i in room_order]) + ".")
        self.intro = f"{WELCOME}\n\n{self._room}\n\nYour task is to: {g.goal}."
        self.reset()

    # ----------------------------------------------------------------- state
    def reset(self) -> None:
        g = self.game
        self.loc = -1  # -1: the middle of the room; else a receptacle index
        self.held = -1  # object index or -1
        self.opened = [False] * len(g.receptacles)
        self.contents: list[list[int]] = [[] for _ in g.receptacles]
        for obj, rec in enumerate(g.start):
            self.contents[rec].append(obj)  # objects are created in index order: lists stay sorted
        self.hot = [False] * len(g.objects)
        self.cool = [False] * len(g.objects)
        self.clean = [False] * len(g.objects)
        self.toggled = [False] * len(g.objects)
        self.won = False
        # Outside "look" tasks the goal counts objects inside receptacles, whose properties change only
        # while held: after the start, only "move" can meet it. Checked after every command in a look
        # task or when the start already meets it (then the first valid command decides, as before).
        self._check_every_command = g.task_type == "look" or self._goal_met()

    def visible(self, rec: int) -> bool:
        return not self.openable[rec] or self.opened[rec]

    # ----------------------------------------------------------------- texts
    def view(self, rec: int) -> str:
        name = self.game.receptacles[rec]
        inside = listing([self.game.objects[o] for o in self.contents[rec]])
        if self.openable[rec]:
            return f"The {name} is open. In it, you see {inside}." if self.opened[rec] else f"The {name} is closed."
        return f"On the {name}, you see {inside}."

    def _describe(self, obj: int) -> str:
        name = self.game.objects[obj]
        hot, cool, clean = self.hot[obj], self.cool[obj], self.clean[obj]
        if clean and hot:
            return f"This is a hot and clean {name}."
        if clean and cool:
            return f"This is a cool and clean {name}."
        if hot:
            return f"This is a hot {name}."
        if clean:
            return f"This is a clean {name}."
        if cool:
            return f"This is a cold {name}."
        if self._lamp[obj]:
            return f"This {name} is {'on' if self.toggled[obj] else 'off'}."
        return f"There's nothing special about {name}."

    # ----------------------------------------------------------------- admissible commands
    def admissible(self) -> tuple[str, ...]:
        """Sorted admissible commands (as textworld sorts them), without ``help``."""
        g = self.game
        loc, held = self.loc, self.held
        cmds = []
        if held >= 0:
            cmds.append(f"examine {g.objects[held]}")
        if loc >= 0:
            rname = g.receptacles[loc]
            cmds.append(f"examine {rname}")
            if self.openable[loc]:
                cmds.append(f"close {rname}" if self.opened[loc] else f"open {rname}")
            if self.visible(loc):
                for o in self.contents[loc]:
                    if self._lamp[o]:
                        cmds.append(f"use {g.objects[o]}")
                    elif held < 0:
                        cmds.append(f"take {g.objects[o]} from {rname}")
                if held >= 0 and g.object_types[held] in self._accepts[loc]:
                    cmds.append(f"move {g.objects[held]} to {rname}")
            if held >= 0:
                verb = self._transform_verb(held, loc)
                if verb:
                    cmds.append(f"{verb} {g.objects[held]} with {rname}")
        always = self._always.copy()
        if loc >= 0:
            always.remove(self._goto[loc])
        for command in cmds:  # the few state-dependent commands, merged into the sorted rest
            insort(always, command)
        return tuple(always)

    def _transform_verb(self, obj: int, rec: int) -> str:
        rt, ot = self.game.receptacle_types[rec], self.game.object_types[obj]
        if rt == "microwave" and ot in catalog.HEATABLE:
            return "heat"
        if rt == "fridge" and ot in catalog.COOLABLE:
            return "cool"
        if rt == "sinkbasin" and ot in catalog.CLEANABLE:
            return "clean"
        return ""

    # ----------------------------------------------------------------- commands
    def act(self, command: str) -> tuple[str, bool]:
        """Apply one command; returns (feedback, valid). Invalid commands change nothing."""
        if len(command) > MAX_COMMAND_CHARS:
            return NOTHING_HAPPENS, False
        text = command.strip()
        verb, _, rest = text.partition(" ")
        handler = _HANDLERS.get(verb)
        feedback = handler(self, rest) if handler else None
        if feedback is None:
            return NOTHING_HAPPENS, False
        if not self.won and (verb == "move" or self._check_every_command):
            self.won = self._goal_met()
        return feedback, True

    def _here(self, name: str) -> int:
        rec = self._rec_index.get(name, -1)
        return rec if rec >= 0 and rec == self.loc else -1

    def _look(self, rest: str) -> str | None:
        if rest:
            return None
        if self.loc < 0:
            return self._room
        return f"You are facing the {self.game.receptacles[self.loc]}. Next to it, you see nothing."

    def _inventory(self, rest: str) -> str | None:
        if rest:
            return None
        if self.held < 0:
            return "You are not carrying anything."
        return f"You are carrying: a {self.game.objects[self.held]}."

    def _go(self, rest: str) -> str | None:
        if not rest.startswith("to "):
            return None
        rec = self._rec_index.get(rest[3:], -1)
        if rec < 0 or rec == self.loc:
            return None
        self.loc = rec
        return f"You arrive at {self.game.receptacles[rec]}. {self.view(rec)}"

    def _open(self, rest: str) -> str | None:
        rec = self._here(rest)
        if rec < 0 or not self.openable[rec] or self.opened[rec]:
            return None
        self.opened[rec] = True
        return f"You open the {rest}. {self.view(rec)}"

    def _close(self, rest: str) -> str | None:
        rec = self._here(rest)
        if rec < 0 or not self.openable[rec] or not self.opened[rec]:
            return None
        self.opened[rec] = False
        return f"You close the {rest}."

    def _take(self, rest: str) -> str | None:
        oname, sep, rname = rest.partition(" from ")
        rec, obj = self._here(rname), self._obj_index.get(oname, -1)
        if not sep or rec < 0 or obj < 0 or self.held >= 0 or self._lamp[obj]:
            return None
        if obj not in self.contents[rec] or not self.visible(rec):
            return None
        self.contents[rec].remove(obj)
        self.held = obj
        return f"You pick up the {oname} from the {rname}."

    def _move(self, rest: str) -> str | None:
        oname, sep, rname = rest.partition(" to ")
        rec, obj = self._here(rname), self._obj_index.get(oname, -1)
        if not sep or rec < 0 or obj < 0 or obj != self.held or not self.visible(rec):
            return None
        if self.game.object_types[obj] not in self._accepts[rec]:
            return None
        inside = self.contents[rec]
        inside.append(obj)
        inside.sort()
        self.held = -1
        return f"You move the {oname} to the {rname}."

    def _transform(self, verb: str, rest: str) -> str | None:
        oname, sep, rname = rest.partition(" with ")
        rec, obj = self._here(rname), self._obj_index.get(oname, -1)
        if not sep or rec < 0 or obj < 0 or obj != self.held or self._transform_verb(obj, rec) != verb:
            return None
        if verb == "heat":
            self.hot[obj], self.cool[obj] = True, False
        elif verb == "cool":
            self.cool[obj], self.hot[obj] = True, False
        else:
            self.clean[obj] = True
        return f"You {verb} the {oname} using the {rname}."

    def _use(self, rest: str) -> str | None:
        obj = self._obj_index.get(rest, -1)
        if obj < 0 or not self._lamp[obj] or self.loc < 0 or obj not in self.contents[self.loc]:
            return None
        self.toggled[obj] = True
        return f"You turn on the {rest}."

    def _examine(self, rest: str) -> str | None:
        rec = self._here(rest)
        if rec >= 0:
            return self.view(rec)
        obj = self._obj_index.get(rest, -1)
        if obj >= 0 and obj == self.held:
            return self._describe(obj)
        return None

    # ----------------------------------------------------------------- goal
    def _goal_met(self) -> bool:
        """The goal of alfworld's PDDL problems for the game's task type."""
        g = self.game
        if g.task_type == "look":
            return (self.held >= 0 and g.object_types[self.held] == g.target_obj and self.loc >= 0
                    and any(self._lamp[o] and self.toggled[o] for o in self.contents[self.loc]))
        prop = {"clean": self.clean, "heat": self.hot, "cool": self.cool}.get(g.task_type)
        need = 2 if g.task_type == "pick2" else 1
        for rec in self._targets:  # the receptacles of the goal's type
            count = sum(1 for o in self.contents[rec]
                        if g.object_types[o] == g.target_obj and (prop is None or prop[o]))
            if count >= need:
                return True
        return False


_HANDLERS = {
    "look": World._look,
    "inventory": World._inventory,
    "go": World._go,
    "open": World._open,
    "close": World._close,
    "take": World._take,
    "move": World._move,
    "heat": lambda w, rest: w._transform("heat", rest),
    "cool": lambda w, rest: w._transform("cool", rest),
    "clean": lambda w, rest: w._transform("clean", rest),
    "use": World._use,
    "examine": World._examine,
}
