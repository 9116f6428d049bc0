"""Oracle for the embedded engine: a planner over the fully known world.

From any state it returns the next command of a short plan: put down anything that is not
needed, walk to a target object, open its receptacle, take it, transform it (heat/cool/clean)
or carry it to a lamp and switch the lamp on, then walk to a goal receptacle, open it and move
the object there. It reads the world's state directly; it never sees the observation text.
"""

from __future__ import annotations

from environments.alfworld import catalog
from environments.alfworld.world import World


def _reach(world: World, rec: int, then: str) -> str:
    """Walk to ``rec``, open it when closed, then do ``then``."""
    name = world.game.receptacles[rec]
    if world.loc != rec:
        return f"go to {name}"
    if not world.visible(rec):
        return f"open {name}"
    return then


def _satisfied(world: World, obj: int, goal_recs: set[int]) -> bool:
    """``obj`` already counts for the goal: in a goal receptacle with the needed property."""
    prop = {"clean": world.clean, "heat": world.hot, "cool": world.cool}.get(world.game.task_type)
    inside = any(obj in world.contents[r] for r in goal_recs)
    return inside and (prop is None or prop[obj])


def expert_action(world: World) -> str:
    """The oracle's next command from the current state."""
    g = world.game
    if world.won:
        return "look"
    wanted = [o for o, t in enumerate(g.object_types) if t == g.target_obj]
    location = {o: r for r, inside in enumerate(world.contents) for o in inside}

    if g.task_type == "look":
        goal_recs: set[int] = set()
    else:
        goal_recs = {r for r, t in enumerate(g.receptacle_types) if t == g.target_recep}
        if g.task_type == "pick2":  # both objects must share one receptacle: the one holding the most
            best = max(sorted(goal_recs), key=lambda r: sum(1 for o in world.contents[r] if o in wanted))
            goal_recs = {best}

    held = world.held
    if held >= 0 and held not in wanted:  # hands full with something useless: put it down
        return _drop(world, held)

    if held >= 0:
        name = g.objects[held]
        if g.task_type == "look":
            lamp = next(o for o, t in enumerate(g.object_types) if t == catalog.LAMP)
            return _reach(world, location[lamp], f"use {g.objects[lamp]}")
        tool = catalog.TOOL_OF_TASK.get(g.task_type)
        prop = {"clean": world.clean, "heat": world.hot, "cool": world.cool}.get(g.task_type)
        if tool and not prop[held]:
            rec = next(r for r, t in enumerate(g.receptacle_types) if t == tool)
            verb = {"clean": "clean", "heat": "heat", "cool": "cool"}[g.task_type]
            return _reach_no_open(world, rec, f"{verb} {name} with {g.receptacles[rec]}")
        rec = min(goal_recs)
        return _reach(world, rec, f"move {name} to {g.receptacles[rec]}")

    # Hands empty: fetch the best remaining target object.
    prop = {"clean": world.clean, "heat": world.hot, "cool": world.cool}.get(g.task_type)
    todo = [o for o in wanted if not _satisfied(world, o, goal_recs)]
    todo.sort(key=lambda o: (not (prop is not None and prop[o]), location[o] != world.loc, o))
    obj = todo[0]
    rec = location[obj]
    return _reach(world, rec, f"take {g.objects[obj]} from {g.receptacles[rec]}")


def _reach_no_open(world: World, rec: int, then: str) -> str:
    """Tools work closed (alfred.pddl has no ``opened`` precondition on heat/cool/clean)."""
    if world.loc != rec:
        return f"go to {world.game.receptacles[rec]}"
    return then


def _drop(world: World, obj: int) -> str:
    """Put ``obj`` into the nearest receptacle that accepts it (here if possible)."""
    g = world.game
    otype = g.object_types[obj]
    fits = [r for r, t in enumerate(g.receptacle_types) if otype in catalog.CAN_CONTAIN[t]]
    fits.sort(key=lambda r: (r != world.loc, world.openable[r] and not world.opened[r], r))
    rec = fits[0]
    return _reach(world, rec, f"move {g.objects[obj]} to {g.receptacles[rec]}")
