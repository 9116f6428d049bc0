"""EMPG against ARLArena's implementation (``compute_EMPG_advantage``; EMPG's authors published no code),
run outside the project by ``tests/fixtures/empg_arlarena/make_fixture.py`` on hand-made and random step
batches, at ARLArena's settings (k = k' = 1, zeta 0.05), this project's default zeta 0.1 and others."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from estimators import StepBatch, get_estimator

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "empg_arlarena" / "advantages.json").read_text())


def batch_of(rows: list[list]) -> StepBatch:
    last: dict[str, int] = {}
    for _, traj, step, _, _ in rows:
        last[traj] = max(step, last.get(traj, -1))
    return StepBatch(group_ids=[r[0] for r in rows], traj_ids=[r[1] for r in rows], step_index=[r[2] for r in rows],
                     rewards=[r[3] for r in rows], terminated=[r[2] == last[r[1]] for r in rows],
                     state_keys=["s"] * len(rows), entropies=[r[4] for r in rows])


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"k{c['k']}-kf{c['k_future']}-z{c['zeta']}-"
                         f"{len(c['rows'])}rows")
def test_empg_equals_arlarenas_implementation(case):
    est = get_estimator("empg", k=case["k"], k_future=case["k_future"], zeta=case["zeta"])
    # ARLArena computes in float32 (entropy means, -0.1 penalties in the scores): differences up to ~3e-5
    np.testing.assert_allclose(est.compute(batch_of(case["rows"])), case["advantages"], rtol=1e-5, atol=1e-4)


def test_the_fixture_is_not_trivial():
    cases = FIXTURE["cases"]
    assert len(cases) >= 30 and {c["zeta"] for c in cases} >= {0.05, 0.1}
    assert all(np.ptp(c["advantages"]) > 0.1 for c in cases)
