"""Write an embedded game as a real alfworld game directory (PDDL problem against ``alfred.pddl``).

The directory holds ``game.tw-pddl`` (domain, problem with ``canContain`` facts, grammar with the
goal) and ``traj_data.json`` (task type and goal parameters, read by alfworld's handcoded expert),
so the real engine (``backend="textworld"``) can play any generated game. Object ids are chosen so
that alfworld's name demangler gives back exactly the embedded names ("sinkbasin 1", "apple 2").
"""

from __future__ import annotations

import json
from pathlib import Path

from environments.alfworld import catalog
from environments.alfworld.generator import Game
from gagpo_core.atomic import atomic_write_text

_LONG_NAMES = {short: long for long, short in catalog.LONG_TASK_TYPES.items()}
_PROPERTY = {"clean": "isClean", "heat": "isHot", "cool": "isCool"}


def _pddl_ids(names: tuple[str, ...], types: tuple[str, ...]) -> list[str]:
    """Ids that alfworld's demangler maps back to ``names`` (it numbers sorted ids from the top)."""
    counts: dict[str, int] = {}
    for t in types:
        counts[t] = counts.get(t, 0) + 1
    ids = []
    for name, t in zip(names, types, strict=True):
        number = int(name.rsplit(" ", 1)[1])
        rank = f"{counts[t] - number:03d}"
        # "basin" in an id makes the demangler append "basin" to the name (ALFRED's Sink|...|SinkBasin).
        ids.append(f"{t[:-5]}_bar_{rank}_bar_basin" if t.endswith("basin") else f"{t}_bar_{rank}")
    return ids


def _type_name(kind: str, suffix: str = "Type") -> str:
    return {"sinkbasin": "SinkBasin", "desklamp": "DeskLamp"}.get(kind, kind.capitalize()) + suffix


def problem(game: Game) -> str:
    """The PDDL problem of ``game``'s start state and goal."""
    recs = _pddl_ids(game.receptacles, game.receptacle_types)
    objs = _pddl_ids(game.objects, game.object_types)
    rtypes = sorted(set(game.receptacle_types) | {"sinkbasin", "microwave", "fridge"})
    otypes = sorted(set(game.object_types) | {"knife", "butterknife"})
    decl = ["agent1 - agent", "loc_start - location"]
    decl += [f"{_type_name(t)} - rtype" for t in rtypes] + [f"{_type_name(t)} - otype" for t in otypes]
    decl += [f"{r} - receptacle" for r in recs] + [f"{o} - object" for o in objs]
    decl += [f"loc_{i} - location" for i in range(len(recs))]
    facts = ["(atLocation agent1 loc_start)"]
    for i, (r, t) in enumerate(zip(recs, game.receptacle_types, strict=True)):
        facts += [f"(receptacleType {r} {_type_name(t)})", f"(receptacleAtLocation {r} loc_{i})"]
        if t in catalog.OPENABLE:
            facts.append(f"(openable {r})")
    for o, t, rec in zip(objs, game.object_types, game.start, strict=True):
        facts += [f"(objectType {o} {_type_name(t)})", f"(inReceptacle {o} {recs[rec]})",
                  f"(objectAtLocation {o} loc_{rec})"]
        facts.append(f"(toggleable {o})" if t == catalog.LAMP else f"(pickupable {o})")
        for flag, kinds in (("heatable", catalog.HEATABLE), ("coolable", catalog.COOLABLE),
                            ("cleanable", catalog.CLEANABLE)):
            if t in kinds:
                facts.append(f"({flag} {o})")
    present = set(game.object_types)
    for rt in sorted(set(game.receptacle_types)):
        facts += [f"(canContain {_type_name(rt)} {_type_name(ot)})" for ot in sorted(catalog.CAN_CONTAIN[rt] & present)]
    return (f"(define (problem {game.split}_{game.task_id})\n(:domain alfred)\n(:objects\n  " + "\n  ".join(decl)
            + ")\n(:init\n  " + "\n  ".join(facts) + ")\n(:goal " + _goal(game) + "))\n")


def _goal(game: Game) -> str:
    obj = _type_name(game.target_obj)
    if game.task_type == "look":
        return ("(and (exists (?l - object ?r - receptacle ?a - agent ?p - location) (and (objectType ?l DeskLampType)"
                " (toggleable ?l) (isToggled ?l) (receptacleAtLocation ?r ?p) (atLocation ?a ?p) (inReceptacle ?l ?r)))"
                f" (exists (?o - object ?a - agent) (and (objectType ?o {obj}) (holds ?a ?o))))")
    rec = _type_name(game.target_recep)
    if game.task_type == "pick2":
        return (f"(exists (?o1 - object ?o2 - object ?r - receptacle)"
                f" (and (objectType ?o1 {obj}) (objectType ?o2 {obj})"
                f" (not (= ?o1 ?o2)) (receptacleType ?r {rec}) (inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r)))")
    prop = f" ({_PROPERTY[game.task_type]} ?o)" if game.task_type in _PROPERTY else ""
    return (f"(exists (?o - object ?r - receptacle) (and (objectType ?o {obj}) (receptacleType ?r {rec})"
            f" (inReceptacle ?o ?r){prop}))")


def write_game_dir(game: Game, directory: Path, domain_pddl: str, grammar_twl2: str) -> Path:
    """Write ``game.tw-pddl`` and ``traj_data.json`` into ``directory``; returns the game file."""
    directory.mkdir(parents=True, exist_ok=True)
    from alfworld.gen.constants import OBJECTS_LOWER_TO_UPPER as camel  # ALFRED's spelling, e.g. "CounterTop"

    params = {
        "object_target": camel[game.target_obj],
        "parent_target": "" if game.task_type == "look" else camel[game.target_recep],
        "toggle_target": "DeskLamp" if game.task_type == "look" else "",
        "mrecep_target": "",
        "object_sliced": False,
    }
    game_data = {"pddl_domain": domain_pddl, "grammar": grammar_twl2.replace("UNKNOWN GOAL", game.goal),
                 "pddl_problem": problem(game), "solvable": True}
    _write_json(directory / "traj_data.json", {"task_type": _LONG_NAMES[game.task_type], "pddl_params": params})
    return _write_json(directory / "game.tw-pddl", game_data)


def _write_json(path: Path, data: dict) -> Path:
    return atomic_write_text(path, json.dumps(data))
