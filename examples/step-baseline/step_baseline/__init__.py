"""REINFORCE with a per-step group baseline, as a gagpo estimator."""

from estimators import Estimator, EstimatorOutput, StepBatch
from estimators.grouping import factorize, segment_center


class StepBaseline(Estimator):
    """Each row's discounted return-to-go minus the mean return-to-go of its rollout group's rows at the
    same step index (the other rollouts of the same task, as far into their episodes)."""

    description = "return-to-go minus its rollout group's mean at the same step"
    label = "Step baseline"  # its rows in gagpo report's tables
    order = 35  # Table 1: after GRPO (30), before GiGPO (40)
    tables = (1,)  # a row of Table 1: --preset table1 sweeps it
    needs_groups = True  # the baseline compares the K rollouts of a task
    defaults = {"gamma": 0.95}

    def _compute(self, batch: StepBatch) -> EstimatorOutput:
        layout = batch.layout  # the rows sorted into trajectories ("slots"), steps in order
        returns = layout.reverse_scan(layout.to_slots(batch.rewards), self.options["gamma"])  # R_t = r_t + g R_t+1
        step = layout.to_slots(batch.step_index)
        cells, count = factorize(layout.group * (step.max(initial=0) + 1) + step)  # (rollout group, step)
        advantages = segment_center(cells, returns, count)  # R_t minus the mean over its cell
        return EstimatorOutput(advantages=layout.to_rows(advantages))  # back in the batch's row order
