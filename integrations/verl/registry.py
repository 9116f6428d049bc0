"""gagpo's estimators in verl's advantage registry (``verl.trainer.ppo.core_algos``).

Every gagpo estimator but ``ppo`` (verl's own ``gae`` is PPO with a critic) is registered under
``gagpo.<name>``, and under its bare gagpo name where verl has no estimator of that name (``gagpo``,
``gigpo``, ``pgpo``, ...; verl's own ``grpo`` and ``rloo`` keep those names). Select one with
``algorithm.adv_estimator=gagpo`` (or ``gagpo.grpo``), options under ``+algorithm.gagpo.*``.
"""

from __future__ import annotations

from estimators import available_estimators, get_estimator
from integrations.verl.bridge import advantage_function

NAMESPACE = "gagpo."


def registrable() -> list[str]:
    """The gagpo estimators the bridge can serve (those without a learned critic)."""
    return [name for name in available_estimators() if not get_estimator(name).needs_critic]


def register() -> dict[str, str]:
    """Register every estimator of ``registrable`` with verl (idempotent); returns verl name -> gagpo name."""
    from verl.trainer.ppo import core_algos

    taken = {str(getattr(e, "value", e)) for e in core_algos.AdvantageEstimator}
    names: dict[str, str] = {}
    for name in registrable():
        for verl_name in (NAMESPACE + name, name):
            owner = core_algos.ADV_ESTIMATOR_REGISTRY.get(verl_name)
            if verl_name in taken or (owner is not None and not getattr(owner, "gagpo_name", None)):
                continue  # verl's own estimator of that name stays
            if owner is None:
                function = advantage_function(name)
                function.gagpo_name = name  # type: ignore[attr-defined]
                core_algos.ADV_ESTIMATOR_REGISTRY[verl_name] = function
            names[verl_name] = name
    return names
