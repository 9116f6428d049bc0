"""Bad input, round three: each case is one ``error:`` line and exit code 2 (or a documented warning),
never a traceback, and nothing the tool wrote is lost.

``ISSUE_CASES``: the tracebacks and silent acceptances a review found (odd model folders, a set-aside
checkpoint exported, bounds on seeds and runs, duplicated cells and YAML keys, empty axes, ``--gpus
1,,2``, ``--min-effect inf``, ``eval --seed -1``). ``OWN_CASES``: thirty more, tried on every command.
The commands run in this process on a finished lab run (bow-mlp on embedded ALFWorld, one iteration).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import assert_one_error_line, run_cli

LAB = ["lab-alfworld", "--iterations", "1", "--set", "train.eval_every=0", "--set", "train.eval_episodes=2",
       "--set", "rollout.tasks_per_batch=2", "--set", "rollout.group_size=2", "--set", "env.max_steps=3",
       "--set", "train.eval_max_steps=3"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished one-iteration lab run (config.yaml, metrics.jsonl, evals/, checkpoints/, eval.json)."""
    root = tmp_path_factory.mktemp("finished")
    code, out, err = run_cli(["train", *LAB, "--output-dir", str(root), "--run-name", "run"])
    assert code == 0, out + err
    return root / "run"


class Case:
    """``prepare(tmp, run)`` builds what the case needs in ``tmp`` (``run``: a copy of the finished run there)
    and returns the arguments; ``words``: what the error line names; ``warning``: the case is a documented
    choice, the command goes on with one ``warning:`` line naming ``words``."""

    def __init__(self, prepare: Callable[[Path, Path], list[str]], *words: str, warning: bool = False):
        self.prepare, self.words, self.warning = prepare, words, warning


def _model_config(text: str) -> Callable[[Path, Path], list[str]]:
    def prepare(tmp: Path, run: Path) -> list[str]:
        (tmp / "model").mkdir()
        (tmp / "model" / "config.json").write_text(text)
        return ["plan", "quickstart", "--model", str(tmp / "model")]
    return prepare


def _file(name: str, text: str) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        (tmp / name).write_text(text)
        return tmp / name
    return write


def _sweep_file(text: str) -> Callable[[Path, Path], list[str]]:
    def prepare(tmp: Path, run: Path) -> list[str]:
        (tmp / "sweep.yaml").write_text(text)
        return ["ablate", str(tmp / "sweep.yaml"), "--dry-run", "--output-dir", str(tmp / "out")]
    return prepare


def _set_aside(command: str) -> Callable[[Path, Path], list[str]]:
    def prepare(tmp: Path, run: Path) -> list[str]:
        (run / "checkpoints" / "iter_000001").rename(run / "checkpoints" / "corrupt-iter_000001")
        target = str(run / "checkpoints" / "corrupt-iter_000001")
        return ["export", target, "--out", str(tmp / "out")] if command == "export" else \
            ["eval", "--policy", target, "--episodes", "1"]
    return prepare


def _edited_eval(**values) -> Callable[[Path, Path], list[str]]:
    def prepare(tmp: Path, run: Path) -> list[str]:
        data = json.loads((run / "eval.json").read_text())
        data.update(values)
        (run / "eval.json").write_text(json.dumps(data))
        return ["report", str(run), "--out", str(tmp / "report")]
    return prepare


def _until_decided(*more: str) -> list[str]:
    return ["ablate", *LAB, "--grid", "optim.lr=0.1,0.2", "--until-decided", "--dry-run", *more]


ISSUE_CASES = {
    "plan: config.json lacks a key": Case(_model_config('{"hidden_size": 64}'), "config.json has no num_hidden_layers"),
    "plan: a text where a number goes": Case(
        _model_config('{"hidden_size": "big", "num_hidden_layers": 2, "intermediate_size": 8, '
                      '"num_attention_heads": 2, "vocab_size": 10}'),
        "hidden_size must be a whole number > 0, got 'big'"),
    "plan: config.json is not JSON": Case(_model_config("not json"), "cannot read", "not a JSON model config"),
    "plan: --gpus 1,,2": Case(lambda t, r: ["plan", "quickstart", "--gpus", "1,,2"], "--gpus", "'1,,2'"),
    "export: a set-aside checkpoint": Case(_set_aside("export"), "set aside as corrupt", "gagpo export"),
    "ablate: --max-seeds 1000000000 --dry-run": Case(
        lambda t, r: _until_decided("--max-seeds", "1000000000"), "at most 1000, got 1000000000"),
    "ablate: --seeds 100000 --dry-run": Case(
        lambda t, r: ["ablate", *LAB, "--seeds", "100000", "--dry-run"], "at most 1000 seeds per cell"),
    "ablate: cells x seeds past the bound": Case(
        lambda t, r: ["ablate", "--grid", "lambda,norm,gamma", "--seeds", "1000", "--dry-run"],
        "45 cells x 1000 seeds = 45000 runs", "at most 10000"),
    "ablate: --grid optim.lr=0.02,2e-2": Case(
        lambda t, r: ["ablate", *LAB, "--grid", "optim.lr=0.02,2e-2", "--dry-run"],
        "'optim.lr=0.02' and 'optim.lr=2e-2' resolve to the same settings"),
    "ablate: a key twice in a sweep file": Case(
        _sweep_file("base: lab-alfworld\naxes:\n  lambda: [0, 1]\n  lambda: [0.5]\n"),
        "sweep.yaml:4:3", "the key 'lambda' is given twice (first at line 3)"),
    "ablate: an empty sweep axis": Case(_sweep_file("base: lab-alfworld\naxes:\n  lambda: []\n"),
                                        "axis 'lambda' lists no values"),
    "ablate: --alpha 1e-300": Case(lambda t, r: ["ablate", *LAB, "--grid", "optim.lr=0.1,0.2", "--until-decided",
                                                 "--alpha", "1e-300", "--output-dir", str(t / "out")],
                                   "too small to decide anything"),
    "report: --min-effect inf": Case(lambda t, r: ["report", str(r), "--min-effect", "inf", "--out", str(t / "rep")],
                                     "--min-effect must be a positive, finite number", "got inf"),
    "eval: --seed -1": Case(lambda t, r: ["eval", "--env", "alfworld", "--seed", "-1", "--episodes", "1"],
                            "--seed must be between 0 and 4294967295", "got -1"),
    "eval: a run on another environment": Case(
        lambda t, r: ["eval", "--policy", str(r), "--env", "webshop", "--episodes", "1", "--max-steps", "1"],
        "was trained on alfworld; evaluating it on webshop", warning=True),
}

OWN_CASES = {
    # train
    "train: --output-dir below a file": Case(lambda t, r: ["train", *LAB, "--output-dir", str(_file("f", "")(t) / "x")],
                                             "cannot create the run directory", "Not a directory"),
    "train: a NaN learning rate": Case(lambda t, r: ["train", *LAB, "--set", "optim.lr=.nan", "--output-dir", str(t)],
                                       "optim.lr must be a finite number > 0", "got nan"),
    "train: --resume with other settings": Case(
        lambda t, r: ["train", *LAB, "--set", "optim.lr=0.5", "--output-dir", str(r.parent), "--run-name", "run",
                      "--resume"], "--resume: the config differs", "optim.lr"),
    "train: --resume, config.yaml a folder": Case(
        lambda t, r: (os.remove(r / "config.yaml"), (r / "config.yaml").mkdir(),
                      ["train", *LAB, "--output-dir", str(r.parent), "--run-name", "run", "--resume"])[-1],
        "--resume: cannot read", "IsADirectoryError"),
    "train: the run folder is a file": Case(
        lambda t, r: ["train", *LAB, "--output-dir", str(t), "--run-name", _file("taken", "")(t).name],
        "cannot create the run directory", "File exists"),
    # ablate
    "ablate: --dry-run into a file": Case(lambda t, r: ["ablate", *LAB, "--dry-run", "--output-dir",
                                                        str(_file("f", "")(t))], "is a file, not a folder"),
    "ablate: a negative seed axis": Case(lambda t, r: ["ablate", *LAB, "--grid", "seed=-1", "--dry-run"],
                                         "axis 'seed' takes whole numbers >= 0"),
    "ablate: --min-effect nan": Case(lambda t, r: _until_decided("--min-effect", "nan"), "--min-effect", "got nan"),
    "ablate: --metric per_type.": Case(lambda t, r: _until_decided("--metric", "per_type."), "unknown --metric"),
    "ablate: sweep.json is a folder": Case(
        lambda t, r: ((t / "sw" / "sweep.json").mkdir(parents=True),
                      ["ablate", *LAB, "--output-dir", str(t), "--name", "sw"])[-1],
        "cannot write the sweep folder", "Is a directory"),
    "ablate: --cpus-per-cell nan": Case(lambda t, r: ["ablate", *LAB, "--cpus-per-cell", "nan", "--dry-run"],
                                        "--cpus-per-cell must be a number > 0"),
    "ablate: --name ..": Case(lambda t, r: ["ablate", *LAB, "--name", "..", "--dry-run"], "bad sweep name '..'"),
    "ablate: a key twice in an experiment file": Case(
        lambda t, r: ["ablate", str(_file("e.yaml", "train:\n  iterations: 3\n  iterations: 5\n")(t)), "--dry-run"],
        "e.yaml:3:3", "the key 'iterations' is given twice"),
    # report
    "report: success rate 1e308": Case(_edited_eval(success_rate=1e308), "success_rate 1e+308 is outside 0..100",
                                       "nothing to report"),
    "report: negative score": Case(_edited_eval(score=-5.0), "score -5.0 is outside 0..100"),
    "report: per_type over 100": Case(_edited_eval(per_type={"pick": 250.0}), "bad per_type"),
    "report: metrics.jsonl a folder": Case(
        lambda t, r: (os.remove(r / "metrics.jsonl"), (r / "metrics.jsonl").mkdir(),
                      ["report", str(r), "--out", str(t / "rep"), "--figures"])[-1],
        "metrics.jsonl: unreadable (IsADirectoryError)", warning=True),
    "report: --table 3": Case(lambda t, r: ["report", str(r), "--table", "3", "--out", str(t / "rep")],
                              "--table must be 1 or 2"),
    # eval
    "eval: a set-aside checkpoint": Case(_set_aside("eval"), "set aside as corrupt", "give the run directory"),
    "eval: a run whose config.yaml is a folder": Case(
        lambda t, r: (os.remove(r / "config.yaml"), (r / "config.yaml").mkdir(),
                      ["eval", "--policy", str(r), "--episodes", "1"])[-1], "config.yaml is not a file"),
    "eval: --json a pipe": Case(lambda t, r: (os.mkfifo(t / "pipe"), ["eval", "--env", "alfworld", "--episodes", "1",
                                                                      "--json", str(t / "pipe")])[-1],
                                "is not a regular file", "would replace"),
    "eval: --seed past numpy's range": Case(
        lambda t, r: ["eval", "--env", "alfworld", "--seed", str(2**40), "--episodes", "1"], "got 1099511627776"),
    "eval: data_dir on embedded ALFWorld": Case(
        lambda t, r: ["eval", "--env", "alfworld", "--option", "data_dir=/nowhere", "--episodes", "1"],
        "data_dir apply to the other backend", "backend=textworld", warning=True),
    "eval: an unknown split": Case(lambda t, r: ["eval", "--env", "alfworld", "--split", "nosuch", "--episodes", "1"],
                                   "unknown alfworld split 'nosuch'"),
    # plan
    "plan: --gpus 0": Case(lambda t, r: ["plan", "quickstart", "--gpus", "0"], "whole numbers >= 1"),
    "plan: --gpus beyond any cluster": Case(lambda t, r: ["plan", "quickstart", "--gpus", "100000000000"],
                                            "at most 4096 GPUs"),
    "plan: config.json a folder": Case(
        lambda t, r: ((t / "m" / "config.json").mkdir(parents=True),
                      ["plan", "quickstart", "--model", str(t / "m")])[-1], "cannot read", "IsADirectoryError"),
    "plan: heads that do not split hidden": Case(
        _model_config('{"hidden_size": 10, "num_hidden_layers": 2, "intermediate_size": 8, '
                      '"num_attention_heads": 3, "vocab_size": 10}'), "must split into num_attention_heads 3"),
    # export, list, play
    "export: a temporary checkpoint folder": Case(
        lambda t, r: (shutil.copytree(r / "checkpoints" / "iter_000001", r / "checkpoints" / ".tmp-iter_000002"),
                      ["export", str(r / "checkpoints" / ".tmp-iter_000002"), "--out", str(t / "out")])[-1],
        "is not a checkpoint folder of the run"),
    "list: an unknown kind": Case(lambda t, r: ["list", "nonsense"], "unknown list kind 'nonsense'"),
    "play: --seed -1": Case(lambda t, r: ["play", "--env", "alfworld", "--seed", "-1"], "--seed must be between 0"),
    "play: a task past the split": Case(lambda t, r: ["play", "--env", "alfworld", "--task", "999999"],
                                        "--task 999999 is out of range"),
}


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", [*ISSUE_CASES, *OWN_CASES])
def test_each_case_is_one_line_and_loses_nothing(finished, tmp_path, monkeypatch, name):
    case = {**ISSUE_CASES, **OWN_CASES}[name]
    monkeypatch.chdir(tmp_path)  # default output folders (runs/, report/) land here
    run = tmp_path / "runs" / "run"
    shutil.copytree(finished, run)
    args = case.prepare(tmp_path, run)
    before = _tree(run)
    code, out, err = run_cli(args)
    if case.warning:
        lines = [line for line in err.strip().splitlines() if line.startswith("warning:")]
        assert code == 0 and lines and "Traceback" not in out + err, (code, out, err)
        assert all(word in " ".join(lines) for word in case.words), err
    else:
        assert_one_error_line(code, out, err, case.words)
    assert _tree(run) == before  # nothing the tool wrote was touched


def test_thirty_cases_of_our_own():
    assert len(OWN_CASES) >= 30
