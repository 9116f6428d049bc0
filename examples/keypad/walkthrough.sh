pip install -e .                      # the package, and with it its entry point
python -m pytest                      # its unit test: the expert wins every task
gagpo list environments               # keypad, from the package gagpo-keypad
gagpo eval --env keypad --policy expert --episodes 8
gagpo train lab-keypad.yaml --iterations 3
gagpo ablate lab-keypad.yaml --grid estimator=grpo,gagpo --iterations 3 --name keypad
gagpo report runs/keypad --table 1    # Table 1 with its column: Keypad Succ.
