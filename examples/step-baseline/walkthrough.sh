pip install -e .                      # the package, and with it its entry point
python -m pytest                      # its unit test on a StepBatch
gagpo list estimators                 # step-baseline, from the package gagpo-step-baseline
gagpo train lab-alfworld --estimator step-baseline --iterations 3
gagpo ablate lab-alfworld --grid estimator=grpo,step-baseline --iterations 3 --name tutorial
gagpo report runs/tutorial --table 1  # Table 1: GRPO, then Step baseline (its order: 35)
