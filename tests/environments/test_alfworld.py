"""The embedded ALFWorld backend: phrasing, grammar, bad input, determinism, splits, expert/random."""

from __future__ import annotations

import random

import pytest

from environments.alfworld import ALFWorldEnvironment, catalog, generator
from environments.alfworld.world import World
from environments.base import Step, available_environments, get_environment


@pytest.fixture(scope="module")
def env() -> ALFWorldEnvironment:
    return ALFWorldEnvironment()


def find_game(split: str, task_type: str, predicate=lambda g: True) -> int:
    for task_id in range(generator.SPLIT_SIZES[split]):
        game = generator.generate(split, task_id)
        if game.task_type == task_type and predicate(game):
            return task_id
    raise AssertionError(f"no {task_type} game in {split}")


def play_expert(episode, split: str, task_id: int, budget: int = 50) -> tuple[list[str], list[Step]]:
    episode.reset(split, task_id)
    actions, steps = [], []
    for _ in range(budget):
        action = episode.expert_action()
        step = episode.step(action)
        actions.append(action)
        steps.append(step)
        if step.done:
            break
    return actions, steps


def test_registered_and_options() -> None:
    assert "alfworld" in available_environments()
    env = get_environment("alfworld", valid_unseen_tasks=10)
    assert env.num_tasks("valid_unseen") == 10
    assert env.num_tasks("train") == 3553 and env.num_tasks("valid_seen") == 140
    assert env.max_steps == 50 and env.task_types == ("pick", "look", "clean", "heat", "cool", "pick2")
    with pytest.raises(ValueError, match="unknown alfworld option"):
        ALFWorldEnvironment(colour="red")
    with pytest.raises(ValueError, match="backend"):
        ALFWorldEnvironment(backend="thor")
    with pytest.raises(ValueError, match="positive integer"):
        ALFWorldEnvironment(train_tasks=0)
    episode = env.new_episode()
    with pytest.raises(ValueError, match="split"):
        episode.reset("test", 0)
    with pytest.raises(ValueError, match="task_id"):
        episode.reset("valid_unseen", 10)


def test_initial_observation_phrasing(env) -> None:
    reset = env.new_episode().reset("valid_unseen", 0)
    intro, room, task = reset.observation.split("\n\n")
    assert intro == "-= Welcome to TextWorld, ALFRED! =-"
    assert room.startswith("You are in the middle of a room. Looking quickly around you, you see a ")
    assert ", and a " in room and room.endswith(".")
    assert task == reset.goal and task.startswith("Your task is to: ") and task.endswith(".")
    assert reset.state_key == reset.observation
    assert reset.task_type in catalog.TASK_TYPES
    # receptacles read by type, numbers descending: "a cabinet 2, a cabinet 1, a countertop 1"
    names = [item.removeprefix("and ").removeprefix("a ") for item in room.split("you see ")[1][:-1].split(", ")]
    types = [n.rsplit(" ", 1)[0] for n in names]
    assert types == sorted(types)
    for t in set(types):
        numbers = [int(n.rsplit(" ", 1)[1]) for n in names if n.rsplit(" ", 1)[0] == t]
        assert numbers == sorted(numbers, reverse=True)
    assert set(reset.admissible_actions) == {f"go to {n}" for n in names} | {"inventory", "look"}
    assert list(reset.admissible_actions) == sorted(reset.admissible_actions)


def test_goal_phrasings_cover_every_template() -> None:
    seen = {tt: set() for tt in catalog.TASK_TYPES}
    for task_id in range(300):
        game = generator.generate("train", task_id)
        for i, template in enumerate(catalog.GOAL_TEMPLATES[game.task_type]):
            if game.goal == template.format(obj=game.target_obj, recep=game.target_recep):
                seen[game.task_type].add(i)
    assert all(found == {0, 1} for found in seen.values()), seen
    look = generator.generate("train", find_game("train", "look"))
    assert look.goal in (f"look at {look.target_obj} under the desklamp",
                         f"examine the {look.target_obj} with the desklamp")


def test_every_command_kind_and_its_feedback() -> None:
    task_id = find_game("train", "heat", lambda g: "cabinet" in g.receptacle_types)
    world = World(generator.generate("train", task_id))
    g = world.game
    assert world.act("inventory") == ("You are not carrying anything.", True)
    assert world.act("look")[0].startswith("You are in the middle of a room.")
    cabinet = "cabinet 1"
    feedback, valid = world.act(f"go to {cabinet}")
    assert valid and feedback == f"You arrive at {cabinet}. The {cabinet} is closed."
    assert world.act(f"go to {cabinet}") == ("Nothing happens.", False)  # already there
    assert world.act(f"close {cabinet}") == ("Nothing happens.", False)
    feedback, valid = world.act(f"open {cabinet}")
    assert valid and feedback.startswith(f"You open the {cabinet}. The {cabinet} is open. In it, you see ")
    assert world.act(f"examine {cabinet}")[0].startswith(f"The {cabinet} is open. In it, you see ")
    assert world.act("look") == (f"You are facing the {cabinet}. Next to it, you see nothing.", True)
    assert world.act(f"close {cabinet}") == (f"You close the {cabinet}.", True)
    # fetch a heatable target and heat it in the microwave
    obj = next(i for i, t in enumerate(g.object_types) if t == g.target_obj)
    oname, rec = g.objects[obj], g.start[obj]
    rname = g.receptacles[rec]
    world.act(f"go to {rname}")
    if world.openable[rec]:
        world.act(f"open {rname}")
    assert f"a {oname}" in world.view(rec)
    assert world.act(f"take {oname} from {rname}") == (f"You pick up the {oname} from the {rname}.", True)
    assert world.act("inventory") == (f"You are carrying: a {oname}.", True)
    assert world.act(f"examine {oname}") == (f"There's nothing special about {oname}.", True)
    assert world.act(f"heat {oname} with microwave 1") == ("Nothing happens.", False)  # not at the microwave
    assert world.act("go to microwave 1")[1]
    assert f"heat {oname} with microwave 1" in world.admissible()
    assert world.act(f"heat {oname} with microwave 1") == (f"You heat the {oname} using the microwave 1.", True)
    assert world.act(f"examine {oname}") == (f"This is a hot {oname}.", True)
    world.act("go to fridge 1")
    assert world.act(f"cool {oname} with fridge 1") == (f"You cool the {oname} using the fridge 1.", True)
    assert world.act(f"examine {oname}") == (f"This is a cold {oname}.", True)  # cooling undoes heat
    world.act("close fridge 1")  # (the object may have started in the fridge)
    assert world.act(f"move {oname} to fridge 1") == ("Nothing happens.", False)  # fridge closed
    world.act("open fridge 1")
    assert world.act(f"move {oname} to fridge 1") == (f"You move the {oname} to the fridge 1.", True)
    assert world.act("inventory") == ("You are not carrying anything.", True)


def test_clean_and_lamp_feedback() -> None:
    clean = World(generator.generate("train", find_game("train", "clean")))
    g = clean.game
    obj = next(i for i, t in enumerate(g.object_types) if t == g.target_obj)
    rname = g.receptacles[g.start[obj]]
    clean.act(f"go to {rname}")
    clean.act(f"open {rname}")
    clean.act(f"take {g.objects[obj]} from {rname}")
    sink = next(n for n, t in zip(g.receptacles, g.receptacle_types, strict=True) if t == "sinkbasin")
    clean.act(f"go to {sink}")
    assert clean.act(f"clean {g.objects[obj]} with {sink}") == (
        f"You clean the {g.objects[obj]} using the {sink}.", True)
    assert clean.act(f"examine {g.objects[obj]}") == (f"This is a clean {g.objects[obj]}.", True)

    look = World(generator.generate("train", find_game("train", "look")))
    g = look.game
    lamp = g.object_types.index("desklamp")
    holder = g.receptacles[g.start[lamp]]
    assert look.act("use desklamp 1") == ("Nothing happens.", False)  # not at the lamp
    look.act(f"go to {holder}")
    assert "use desklamp 1" in look.admissible()
    assert look.act("take desklamp 1 from " + holder) == ("Nothing happens.", False)  # lamps stay
    assert look.act("use desklamp 1") == ("You turn on the desklamp 1.", True)
    assert look.act("use desklamp 1") == ("You turn on the desklamp 1.", True)  # isToggled stays true


def test_bad_input_is_an_invalid_no_op(env) -> None:
    episode = env.new_episode()
    reset = episode.reset("valid_unseen", 3)
    for action in ["x" * 10_000, "go to " + "cabinet 1" * 2000, "", "   ", "ünïcödé ☃ 去", "go to cabinet 1\x00",
                   "GO TO cabinet 1", "put apple 1 in/on fridge 1", "go to", "take", "look around", "\n"]:
        step = episode.step(action)
        assert (step.observation, step.valid, step.done, step.reward) == ("Nothing happens.", False, False, 0.0)
        assert step.state_key == "Nothing happens."
        assert step.admissible_actions == reset.admissible_actions
    assert episode.step(None).valid is False  # type: ignore[arg-type]
    step = episode.step("  " + reset.admissible_actions[0] + "  ")  # surrounding whitespace is stripped
    assert step.valid and step.observation.startswith("You arrive at ")


def test_same_task_same_observations_and_state_keys(env) -> None:
    def rollout(seed: int) -> list[str]:
        episode = env.new_episode()
        reset = episode.reset("train", 17, seed=seed)
        rng, adm, seen = random.Random(123), reset.admissible_actions, [reset.observation]
        for _ in range(50):
            step = episode.step(rng.choice(adm + ("nonsense",)))
            adm = step.admissible_actions
            seen.append(step.observation + "|" + step.state_key + "|" + "/".join(adm))
        return seen

    assert rollout(0) == rollout(0)
    assert generator.generate("valid_seen", 5) == generator.generate("valid_seen", 5)


def test_same_state_by_two_paths_has_same_state_key(env) -> None:
    task_id = find_game("valid_seen", "pick",
                        lambda g: g.receptacles[0] == "cabinet 1" and "countertop 1" in g.receptacles)
    a, b = env.new_episode(), env.new_episode()
    a.reset("valid_seen", task_id)
    b.reset("valid_seen", task_id)
    path_a = ["go to cabinet 1", "open cabinet 1", "close cabinet 1", "go to countertop 1"]
    path_b = ["inventory", "go to countertop 1", "go to cabinet 1", "look", "go to countertop 1"]
    last_a = [a.step(x) for x in path_a][-1]
    last_b = [b.step(x) for x in path_b][-1]
    assert last_a.valid and last_b.valid
    assert last_a.state_key == last_b.state_key == last_a.observation
    assert last_a.admissible_actions == last_b.admissible_actions


def test_valid_unseen_holds_out_layouts_and_combinations() -> None:
    def goals(split: str, n: int) -> tuple[set[int], set[tuple[str, str, str]]]:
        plans, combos = set(), set()
        for task_id in range(n):
            g = generator.generate(split, task_id)
            plans.add(g.floorplan)
            combos.add((g.task_type, g.target_obj, g.target_recep))
        return plans, combos

    train_plans, train_combos = goals("train", 3553)
    seen_plans, seen_combos = goals("valid_seen", 140)
    unseen_plans, unseen_combos = goals("valid_unseen", 134)
    assert not unseen_plans & (train_plans | seen_plans)
    assert seen_plans <= train_plans
    held_out = {c for c in unseen_combos if generator.is_held_out(*c)}
    assert len(held_out) >= 20
    assert not held_out & (train_combos | seen_combos)
    assert not any(generator.is_held_out(*c) for c in train_combos | seen_combos)
    layouts = {s: set(generator.floorplans(s).values()) for s in catalog.SCENE_RECEPTACLES}
    assert all(len(v) == generator.FLOORPLANS_PER_SCENE for v in layouts.values())  # pairwise distinct


def test_expert_solves_valid_unseen_and_random_does_not(env) -> None:
    episode = env.new_episode()
    wins = 0
    for task_id in range(100):
        _, steps = play_expert(episode, "valid_unseen", task_id)
        assert all(s.valid for s in steps)
        wins += steps[-1].won
        assert steps[-1].done == steps[-1].won and steps[-1].reward == (1.0 if steps[-1].won else 0.0)
    assert wins >= 95

    rng, random_wins = random.Random(0), 0
    for task_id in range(100):
        adm = episode.reset("valid_unseen", task_id).admissible_actions
        for _ in range(50):
            step = episode.step(rng.choice(adm))
            adm = step.admissible_actions
            if step.done:
                break
        random_wins += step.won
    assert random_wins < 20


def test_expert_recovers_from_a_random_prefix(env) -> None:
    episode = env.new_episode()
    rng, wins = random.Random(1), 0
    for task_id in range(60):
        adm = episode.reset("train", task_id).admissible_actions
        for _ in range(15):
            adm = episode.step(rng.choice(adm)).admissible_actions
        for _ in range(35):
            step = episode.step(episode.expert_action())
            assert step.valid
            if step.done:
                break
        wins += step.won
    assert wins == 60


def test_pick2_needs_two_objects_in_one_receptacle(env) -> None:
    task_id = find_game("valid_unseen", "pick2")
    episode = env.new_episode()
    actions, steps = play_expert(episode, "valid_unseen", task_id)
    moves = [i for i, a in enumerate(actions) if a.startswith("move ")]
    assert len(moves) == 2 and steps[moves[0]].won is False and steps[moves[1]].won is True
    assert steps[-1].observation.startswith("You move the ")
