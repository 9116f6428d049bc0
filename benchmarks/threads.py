"""OpenMP's wait policy and thread count for a language-model step, on a free machine and while another
process holds a core (``gagpo_cli/threads.py``: gagpo sets ``OMP_WAIT_POLICY=PASSIVE`` unless the
environment sets a policy).

Each measurement is a fresh process (OpenMP reads its wait policy once, when torch loads it) that
builds a Llama of SmolLM2-135M's shape with random weights (the same arithmetic as the real model,
nothing downloaded) and times ``--steps`` no-grad forwards of a ``--batch`` x ``--tokens`` batch after
one warm-up, reporting the median wall and CPU seconds of a step. Settings: OpenMP's default policy
(threads spin a while at the end of each parallel region) and ``PASSIVE``, each with 1 thread and
with as many as the cores; every setting once on the machine as it is and once beside a busy process
(a Python loop this script starts and stops). The settings alternate, so load that changes during the
run falls on all of them.

    python benchmarks/threads.py [--steps 3] [--batch 4] [--tokens 128] [--rounds 2]

Prints one JSON line per measurement, then the ratios default / passive per (threads, busy). Measured
numbers are in ``benchmarks/README.md`` (thread policy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, statistics, sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
threads, steps, batch, tokens = map(int, sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                     tie_word_embeddings=True)  # SmolLM2-135M's shape
model = LlamaForCausalLM(config).eval()
ids = torch.randint(0, config.vocab_size, (batch, tokens))
walls, cpus = [], []
with torch.no_grad():
    model.model(input_ids=ids)  # warm-up
    for _ in range(steps):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        model.model(input_ids=ids)
        after = resource.getrusage(resource.RUSAGE_SELF)
        walls.append(time.perf_counter() - start)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
print(json.dumps({"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus)}))
"""


def measure(policy: str | None, threads: int, args: argparse.Namespace) -> dict:
    """One fresh process's median step under ``policy`` (None: OpenMP's default) and ``threads``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(args.steps), str(args.batch),
                          str(args.tokens)], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="times every setting is measured")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    results: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):
        for busy in (False, True):
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
            try:
                for threads in sorted({1, cores}):
                    for policy in (None, "PASSIVE"):
                        got = measure(policy, threads, args)
                        results.setdefault((busy, threads, policy), []).append(got["wall_s"])
                        print(json.dumps({"busy_process": busy, "threads": threads, "policy": policy or "default",
                                          "load": round(os.getloadavg()[0], 2), **got}), flush=True)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
    for (busy, threads, policy), walls in sorted(results.items(), key=str):
        if policy is None:
            passive = statistics.median(results[(busy, threads, "PASSIVE")])
            print(json.dumps({"busy_process": busy, "threads": threads,
                              "default_over_passive": round(statistics.median(walls) / passive, 2)}))


if __name__ == "__main__":
    main()
