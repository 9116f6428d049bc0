"""Sweep expansion without training: axes, presets, sweep files, cell names, overrides, validation,
run status, and the command line's one-line errors."""

from __future__ import annotations

import pytest
import yaml
from support import run_cli

from gagpo_cli.config import load_config
from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.grid import expand, parse_grid
from gagpo_cli.sweep.process import threads_per_job
from gagpo_cli.sweep.spec import build_sweep, builtin_sweeps, coalesce_overrides
from gagpo_cli.sweep.status import run_state, write_status


def test_lambda_norm_is_the_product_of_the_default_values(tmp_path):
    sweep = build_sweep(grid=["lambda,norm"], flags={"output_dir": str(tmp_path)})
    assert len(sweep.cells) == 15 and len(sweep.runs) == 15
    assert sweep.cells[0].name == "lambda=0,norm=group" and sweep.cells[-1].name == "lambda=1,norm=none"
    run = next(r for r in sweep.runs if r.cell.name == "lambda=0.8,norm=batch")
    assert run.run_dir == tmp_path.resolve() / "lambda-norm" / "lambda=0.8,norm=batch" / "s0"
    args = list(run.train_args)
    assert args[args.index("--run-name") + 1] == "s0"
    assert args[args.index("--output-dir") + 1] == str(run.run_dir.parent)
    # both options reach the trainer's config (a dotted override alone would replace the mapping)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert load_config(None, sets).estimator.options == {"lam": 0.8, "norm": "batch"}


def test_explicit_values_dotted_keys_and_seeds():
    axes = parse_grid("lambda=0,0.8,1,norm=none")
    assert [a.name for a in axes] == ["lambda", "norm"]
    assert [v.label for v in axes[0].values] == ["0", "0.8", "1"]
    sweep = build_sweep(grid=["optim.lr=1e-6,3e-6", "lora"], seeds=3)
    assert [c.name for c in sweep.cells] == ["optim.lr=1e-6,lora=lora", "optim.lr=1e-6,lora=full",
                                             "optim.lr=3e-6,lora=lora", "optim.lr=3e-6,lora=full"]
    assert len(sweep.runs) == 12 and sorted({r.seed for r in sweep.runs}) == [0, 1, 2]
    seeded = build_sweep(grid=["seed=4,7", "norm=group"])
    assert [r.seed for r in seeded.runs] == [4, 7] and len(seeded.cells) == 1


def test_model_labels_are_folder_safe():
    cells = expand(parse_grid("model=Qwen/Qwen2.5-1.5B-Instruct,Qwen/Qwen2.5-7B-Instruct"))
    assert [c.name for c in cells] == ["model=Qwen2.5-1.5B-Instruct", "model=Qwen2.5-7B-Instruct"]
    assert cells[0].overrides == (("model.name", "Qwen/Qwen2.5-1.5B-Instruct"),)


def test_presets_table2_rows_and_table1_methods_by_environments():
    table2 = build_sweep(preset="table2")
    assert [c.name.split("=", 1)[1] for c in table2.cells] == [
        "gagpo", "gagpo-lambda0", "gagpo-mc", "gagpo-token-ratio", "gagpo-broadcast", "gagpo-batch-norm",
        "gagpo-no-norm"]
    table1 = build_sweep(preset="table1")
    assert len(table1.cells) == 12
    gigpo = next(r for r in table1.runs if r.cell.name == "method=gigpo-nostd,env=webshop")
    sets = [gigpo.train_args[i + 1] for i, a in enumerate(gigpo.train_args) if a == "--set"]
    cfg = load_config(None, sets)
    assert (cfg.estimator.name, cfg.estimator.options["mode"], cfg.env.name) == ("gigpo", "mean_norm", "webshop")
    assert cfg.env.max_steps == 15  # each environment at the paper's step budget, whatever the base's


@pytest.mark.parametrize(("base", "axis", "kept"), [
    ("lab-alfworld", None, "env.eval_split"),               # --preset table1 on a lab base
    ("lab-webshop", "env=alfworld,webshop", "env.options"),
])
def test_an_env_axis_does_not_carry_one_environments_settings_to_another(base, axis, kept):
    with pytest.raises(UsageError, match=rf"{base} sets {kept} for .* lab-table1-alfworld"):
        build_sweep(base, grid=[axis] if axis else [], preset=None if axis else "table1")
    # fine: an env axis that stays on the base's environment; the preset on a base without such settings
    build_sweep("lab-alfworld", grid=["env=alfworld"])
    build_sweep("alfworld-gagpo", preset="table1")


def test_builtin_sweep_files_expand():
    sweeps = builtin_sweeps()
    assert {"table1", "table2-alfworld", "table2-webshop"} <= set(sweeps)
    table1 = build_sweep("table1")
    assert (len(table1.cells), table1.seeds) == (12, [0, 1, 2])
    webshop = next(r for r in table1.runs if r.cell.name.endswith("env=webshop"))
    sets = [webshop.train_args[i + 1] for i, a in enumerate(webshop.train_args) if a == "--set"]
    assert load_config(webshop.train_args[0], sets).env.max_steps == 15
    assert len(build_sweep("table2-alfworld").runs) == 21


@pytest.mark.parametrize("name", sorted(builtin_sweeps()))
def test_every_shipped_sweep_can_be_launched(name, tmp_path):
    """What `gagpo ablate` does before launching: runs as dictionary keys, their states read (a cell
    whose value is a mapping, `estimator.options: {...}`, once made that a TypeError)."""
    sweep = build_sweep(name, flags={"output_dir": str(tmp_path)})
    states = {run: run.state() for run in sweep.runs}
    assert len(states) == len(sweep.runs) > 0


def test_sweep_file_with_composite_axis(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "base": "quickstart", "seeds": [3],
                                    "axes": {"clip": {"tight": {"optim.clip_low": 0.1, "optim.clip_high": 0.1},
                                                      "loose": {"optim.clip_low": 0.3, "optim.clip_high": 0.3}}},
                                    "set": ["train.iterations=1"]}, sort_keys=False))
    sweep = build_sweep(str(path), flags={"output_dir": str(tmp_path)})
    assert [c.name for c in sweep.cells] == ["clip=tight", "clip=loose"]
    assert sweep.runs[1].run_dir == tmp_path.resolve() / "mine" / "clip=loose" / "s3"
    assert "train.iterations=1" in sweep.runs[0].train_args


def test_coalesce_merges_entries_of_a_mapping_over_the_base():
    base = load_config("alfworld-gagpo")
    texts = coalesce_overrides(base, ["optim.lr=1e-5", "estimator.options.lam=0.5", "env.options.data_dir=/d"])
    cfg = load_config("alfworld-gagpo", texts)
    assert cfg.estimator.options == {"gamma": 0.95, "lam": 0.5} and cfg.env.options == {"data_dir": "/d"}
    assert cfg.optim.lr == 1e-5


@pytest.mark.parametrize("grid, message", [
    ("lamda", "unknown axis 'lamda'. Did you mean 'lambda'?"),
    ("lambda=", "empty or malformed value list for axis 'lambda'"),
    ("lambda=0,,1", "empty or malformed value list"),
    ("=0,1", "malformed '=0'"),
    ("optim.lr", "axis 'optim.lr' needs values"),
    ("optim.lr=fast,1e-6", "key 'optim.lr' expects float"),
    ("optim.lrr=1,2", "did you mean 'optim.lr'"),
    ("lambda=2", "must lie in [0, 1]"),
    ("estimator=gagpo,gagpoo", "Did you mean 'gagpo'"),
    ("lambda,lambda", "axis 'lambda' is given twice"),
    ("lambda=0,0.0", "lists a value twice"),
])
def test_bad_grids_are_usage_errors(grid, message):
    with pytest.raises(UsageError) as info:
        build_sweep(grid=[grid])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_set_of_an_axis_key_and_unknown_preset_are_errors():
    with pytest.raises(UsageError, match="varies"):
        build_sweep(grid=["lambda"], sets=["estimator.options.lam=0.5"])
    with pytest.raises(UsageError, match="Did you mean 'table2'"):
        build_sweep(preset="table3")
    with pytest.raises(UsageError, match="varies"):
        build_sweep(preset="table2", flags={"estimator": "grpo"})


def test_threads_split_the_cores_between_jobs():
    assert threads_per_job(1, cores=8) == 8
    assert threads_per_job(3, cores=8) == 2
    assert threads_per_job(4, cores=2) == 1


def test_run_state_from_the_run_directory(tmp_path):
    run = tmp_path / "s0"
    assert run_state(run).state == "pending"
    run.mkdir()
    write_status(run, "running", pid=2**22 + 12345, launcher="local")  # no such process
    assert run_state(run).state == "pending" and run_state(run).detail == "interrupted"
    (run / "train.log").write_text("loading\nerror: unknown environment 'x'\n")
    write_status(run, "failed", returncode=2, error="error: unknown environment 'x'")
    assert run_state(run).state == "failed" and "unknown environment" in run_state(run).detail
    (run / "checkpoints" / "iter_000003").mkdir(parents=True)
    write_status(run, "running", pid=2**22 + 12345)
    assert run_state(run).detail == "resume from iteration 3"
    (run / "eval.json").write_text("{}")
    assert run_state(run).state == "done"


def _cli(*args: str) -> tuple[int, str, str]:
    """``gagpo ARGS`` in this process (the entry point in a fresh interpreter: test_cli_list.py)."""
    return run_cli(list(args))


def test_dry_run_lists_the_cells_and_runs_nothing(tmp_path):
    code, out, err = _cli("ablate", "--grid", "lambda,norm", "--dry-run", "--output-dir", str(tmp_path))
    assert code == 0, err
    assert "15 cells x 1 seeds = 15 runs" in out and "lambda=0.95,norm=batch" in out
    code, out, _ = _cli("ablate", "--preset", "table2", "--dry-run", "--output-dir", str(tmp_path))
    assert code == 0 and "7 cells" in out and "gagpo-no-norm" in out
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, message", [
    (["--grid", "lamda"], "unknown axis 'lamda'"),
    (["--grid", "lambda="], "empty or malformed value list"),
    (["--grid", "train.iterations=a,b"], "expects an integer"),
    (["--preset", "table9"], "unknown preset"),
    (["no-such-sweep"], "not found"),
    (["--jobs", "0"], "--jobs is the number of runs at once: a whole number >= 1, got 0"),
    (["--jobs", "-2"], "got -2"),
    (["--launcher", "slurm"], "unknown launcher 'slurm'; valid: local, ray"),
    (["--address", "10.0.0.1:6379"], "add --launcher ray"),
    (["--launcher", "ray", "--cpus-per-cell", "0"], "--cpus-per-cell must be a number > 0"),
    (["--launcher", "ray", "--jobs", "4"], "--jobs is for --launcher local"),
    (["--grid", "seed=1,x"], "axis 'seed' takes whole numbers >= 0, got 'x'"),
    (["--name", ""], "bad sweep name ''"),
    (["--set", "train.threads=0"], "train.threads must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    code, out, err = _cli("ablate", *args, "--output-dir", str(tmp_path), "--dry-run")
    assert code == 2, out + err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
