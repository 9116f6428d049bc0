from environments import get_environment


def test_the_expert_types_every_code_within_the_budget():
    env = get_environment("keypad")
    for task in range(env.num_tasks("test")):
        episode = env.new_episode()
        assert episode.reset("test", task).task_type in env.task_types
        steps = [episode.step(episode.expert_action()) for _ in range(len(episode.code))]
        assert steps[-1].won and steps[-1].done and steps[-1].reward == 1.0 and len(steps) <= env.max_steps


def test_a_wrong_digit_clears_the_display():
    episode = get_environment("keypad").new_episode()
    code = episode.reset("train", 0).goal.removeprefix("type the code ").split()
    assert episode.step(f"press {code[0]}").observation == f"The display shows: {code[0]}."
    wrong = next(digit for digit in ("one", "two") if digit != code[1])
    assert episode.step(f"press {wrong}").observation == "The display shows: nothing."
    assert not episode.step("open the door").valid  # not a key: an invalid no-op
