"""The paper's sweeps as presets: ``--preset table2`` (GAGPO and its six ablations,
docs/algorithms.md#ablations order) and ``--preset table1`` (the compared methods x the two
environments, each at the paper's step budget). A base experiment made for one environment (its
options, its splits) is refused by the sweep rather than given to the other (``spec.py``)."""

from __future__ import annotations

from gagpo_cli.errors import UsageError
from gagpo_cli.sweep.grid import Axis, AxisValue
from gagpo_core.plugins import unknown_name_message

# docs/algorithms.md#ablations: the rows of Table 2, in the paper's order
TABLE2_ESTIMATORS = ("gagpo", "gagpo-lambda0", "gagpo-mc", "gagpo-token-ratio", "gagpo-broadcast",
                     "gagpo-batch-norm", "gagpo-no-norm")

# Table 1 methods: label -> overrides (GiGPO in both modes, docs/algorithms.md#baselines)
TABLE1_METHODS: dict[str, dict[str, object]] = {
    "ppo": {"estimator.name": "ppo"},
    "rloo": {"estimator.name": "rloo"},
    "grpo": {"estimator.name": "grpo"},
    "gigpo-std": {"estimator.name": "gigpo", "estimator.options.mode": "mean_std_norm"},
    "gigpo-nostd": {"estimator.name": "gigpo", "estimator.options.mode": "mean_norm"},
    "gagpo": {"estimator.name": "gagpo"},
}
# Table 1 environments: label -> overrides (the paper's step budgets: ALFWorld 50, WebShop 15)
TABLE1_ENVS: dict[str, dict[str, object]] = {
    "alfworld": {"env.name": "alfworld", "env.max_steps": 50},
    "webshop": {"env.name": "webshop", "env.max_steps": 15},
}


def _table2() -> list[Axis]:
    return [Axis("estimator", tuple(AxisValue(name, (("estimator.name", name),)) for name in TABLE2_ESTIMATORS))]


def _table1() -> list[Axis]:
    methods = Axis("method", tuple(AxisValue(label, tuple(o.items())) for label, o in TABLE1_METHODS.items()))
    envs = Axis("env", tuple(AxisValue(label, tuple(o.items())) for label, o in TABLE1_ENVS.items()))
    return [methods, envs]


PRESETS = {"table1": _table1, "table2": _table2}


def preset_axes(name: str) -> list[Axis]:
    """The axes of preset ``name``; an unknown name is a ``UsageError`` naming the valid ones."""
    if name not in PRESETS:
        raise UsageError(unknown_name_message("preset", name, list(PRESETS)))
    return PRESETS[name]()
