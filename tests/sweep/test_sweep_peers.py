"""The built-in sweep ``peers``: every peer method x both environments, with per-(method, env) settings."""

from __future__ import annotations

import warnings

from gagpo_cli.config import load_config
from gagpo_cli.sweep.spec import build_sweep

METHODS = ("gagpo", "gigpo", "pgpo", "hgpo", "graft", "g2po", "graphgpo", "planpo", "empg")


def _config(run):
    sets = [run.train_args[i + 1] for i, a in enumerate(run.train_args) if a == "--set"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config(run.train_args[0], sets)


def test_peers_sweep_covers_every_method_and_environment(tmp_path):
    sweep = build_sweep("peers", flags={"output_dir": str(tmp_path)})
    assert sweep.seeds == [0, 1, 2] and len(sweep.cells) == 2 * len(METHODS)
    first = {r.cell.name: _config(r) for r in sweep.runs if r.seed == 0}
    pairs = {(c.estimator.name, c.env.name, c.env.max_steps) for c in first.values()}
    assert pairs == {(m, e, steps) for m in METHODS for e, steps in (("alfworld", 50), ("webshop", 15))}
    assert first["run=graft-alfworld"].estimator.options["lam"] == 0.95  # GRAFT: lambda per environment
    assert first["run=graft-webshop"].estimator.options["lam"] == 0.8
    assert first["run=graft-webshop"].estimator.options["gamma"] == 0.99
    # the official scripts' per-environment settings: G2PO's mode, GraphGPO's graph discount
    assert first["run=g2po-alfworld"].estimator.options["mode"] == "mean_std_norm"
    assert first["run=g2po-webshop"].estimator.options.get("mode", "mean_norm") == "mean_norm"
    assert first["run=graphgpo-webshop"].estimator.options["graph_gamma"] == 0.2
    assert "graph_gamma" not in first["run=graphgpo-alfworld"].estimator.options  # the default, 0.10
    # GiGPO's and HGPO's official WebShop scripts normalise by the mean only (docs/peers.md)
    assert first["run=gigpo-webshop"].estimator.options["mode"] == "mean_norm"
    assert first["run=hgpo-webshop"].estimator.options["mode"] == "mean_norm"
    assert first["run=gigpo-alfworld"].estimator.options.get("mode", "mean_std_norm") == "mean_std_norm"
