"""verl run logs as report runs, so runs trained at scale on verl (verl-agent's ALFWorld / WebShop
launch scripts, gagpo's estimators through ``integrations.verl``) sit in Table 1/2 beside gagpo's own.

Three forms of verl's logging (``trainer.logger``), all read as ``(step, metrics)``:

- ``console``: the text verl prints, ``step:N - key:value - ...`` (a Ray prefix ``(TaskRunner pid=..)``
  is allowed); the resolved config that verl's ``main_ppo`` prints first (``pprint``) names the run;
- ``file``: verl's JSONL (``{"step": N, "data": {...}}`` per line; ``VERL_FILE_LOGGER_PATH``); its config
  comes from a console log or a ``.yaml`` of the same name beside it;
- ``wandb`` offline: an ``offline-run-*/run-*.wandb`` file (its history and config records).

Validation metrics (verl-agent's names, rates in 0..1): ``val/success_rate``; ALFWorld's
``val/<task>_success_rate`` per task type; WebShop's ``val/webshop_task_score (not success_rate)``. Every
step that logs ``val/success_rate`` is one evaluation (step 0: ``val_before_train``'s baseline); the last
is the run's final evaluation. The config gives the method (``algorithm.adv_estimator``: gagpo's name,
``gagpo.<name>`` as gagpo's; verl's ``gae`` is ``ppo``), the environment (``env.env_name``), the seed
(``env.seed``, else ``data.seed``, else 0), the model and the planned steps (``trainer.total_training_steps``).
"""

from __future__ import annotations

import ast
import json
import re
import struct
from pathlib import Path
from typing import Any

import yaml

SOURCE = "verl"
ALFWORLD_TYPES = {"pick_and_place": "pick", "pick_two_obj_and_place": "pick2", "look_at_obj_in_light": "look",
                  "pick_heat_then_place_in_recep": "heat", "pick_cool_then_place_in_recep": "cool",
                  "pick_clean_then_place_in_recep": "clean"}
WEBSHOP_SCORE = "val/webshop_task_score (not success_rate)"
ESTIMATOR_NAMES = {"gae": "ppo"}
_CONSOLE_LINE = re.compile(r"^(?:\([^)]*\)\s*)?step:(\d+)( - .*)?$")
_WANDB_BLOCK, _WANDB_HEADER = 32768, 7  # wandb's record file: leveldb-style log blocks, a 7-byte header


def _console(path: Path) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    """The config dict verl printed first and every ``step:N - key:value`` line."""
    config: dict[str, Any] = {}
    steps = []
    block: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not config and (block or line.startswith("{")):  # the pprinted config: lines until it parses
            block.append(line)
            try:
                parsed = ast.literal_eval("\n".join(block))
            except (SyntaxError, ValueError):
                if len(block) > 5000:
                    block = []
                continue
            config, block = (parsed if isinstance(parsed, dict) else {}), []
            continue
        found = _CONSOLE_LINE.match(line.strip())
        if not found:
            continue
        metrics = {}
        for item in (found.group(2) or "").split(" - ")[1:]:
            key, _, value = item.rpartition(":")
            try:
                metrics[key] = float(value)
            except ValueError:
                continue
        steps.append((int(found.group(1)), metrics))
    return config, steps


def _jsonl(path: Path) -> list[tuple[int, dict[str, Any]]] | None:
    """verl's ``file`` backend lines, or None when the file is not one."""
    steps = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int) or not isinstance(
                record.get("data"), dict):
            return None
        steps.append((record["step"], record["data"]))
    return steps


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a wandb ``.wandb`` file (its leveldb-style log: 32 KiB blocks, each record a header
    ``<checksum u32, length u16, type u8>`` then data; types 1 full, 2 first, 3 middle, 4 last)."""
    raw = path.read_bytes()
    if raw[:4] != b":W&B":
        raise ValueError(f"{path}: not a wandb run file")
    records, pending, pos = [], b"", _WANDB_HEADER
    while pos + 7 <= len(raw):
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < 7:  # a block's zero-padded tail
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            break
        if kind == 1:
            records.append(data)
        elif kind == 2:
            pending = data
        elif kind == 3:
            pending += data
        elif kind == 4:
            records.append(pending + data)
            pending = b""
    return records


def _wandb(path: Path) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    from wandb.proto import wandb_internal_pb2 as pb

    config: dict[str, Any] = {}
    steps = []
    for data in _wandb_records(path):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else ()
        for item in updates:
            if not item.key.startswith("_"):
                config[item.key] = json.loads(item.value_json)
        if kind == "history":
            values = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            if "_step" in values:
                steps.append((int(values.pop("_step")), {k: v for k, v in values.items() if not k.startswith("_")}))
    return config, steps


def _evaluation(step: int, metrics: dict[str, Any], env: str) -> dict[str, Any]:
    """gagpo's ``eval.json`` numbers (percent) of one verl validation step."""
    success = 100.0 * float(metrics["val/success_rate"])
    per_type = {ALFWORLD_TYPES[t]: 100.0 * float(v) for key, v in metrics.items()
                if (t := key.removeprefix("val/").removesuffix("_success_rate")) in ALFWORLD_TYPES}
    score = 100.0 * float(metrics[WEBSHOP_SCORE]) if WEBSHOP_SCORE in metrics else success
    return {"iteration": step, "success_rate": success, "score": score, "per_type": per_type, "env": env,
            "source": SOURCE}


def _gagpo_config(verl: dict[str, Any], path: Path) -> dict[str, Any]:
    """The keys ``gagpo report`` groups runs by, from a verl config."""
    def get(*keys: str) -> Any:
        node: Any = verl
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    estimator = str(get("algorithm", "adv_estimator") or "unknown")
    estimator = ESTIMATOR_NAMES.get(estimator, estimator.removeprefix("gagpo."))
    env = str(get("env", "env_name") or "unknown").split("/")[0].lower()
    seed = get("env", "seed")
    seed = get("data", "seed") if seed is None else seed
    return {"name": SOURCE, "source": SOURCE,
            "estimator": {"name": estimator, "options": dict(get("algorithm", "gagpo") or {})},
            "env": {"name": env}, "model": {"name": str(get("actor_rollout_ref", "model", "path") or "unknown")},
            "train": {"seed": int(seed or 0), "iterations": get("trainer", "total_training_steps")}}


def _beside(path: Path) -> dict[str, Any]:
    """The config of a JSONL log: from a ``.yaml`` or a console ``.log`` of the same name beside it."""
    for suffix in (".yaml", ".yml"):
        if path.with_suffix(suffix).is_file():
            loaded = yaml.safe_load(path.with_suffix(suffix).read_text(encoding="utf-8"))
            return loaded if isinstance(loaded, dict) else {}
    for suffix in (".log", ".txt"):
        if path.with_suffix(suffix).is_file():
            return _console(path.with_suffix(suffix))[0]
    return {}


def read_verl_log(path: Path) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]] | None:
    """(the run's config in gagpo's keys, its evaluations by step) of a verl log (module docstring), or
    None when ``path`` is no verl log or holds no validation step."""
    path = Path(path)
    if path.suffix == ".wandb":
        config, steps = _wandb(path)
    elif path.suffix == ".jsonl":
        found = _jsonl(path)
        if found is None:
            return None
        config, steps = _beside(path), found
    else:
        config, steps = _console(path)
    record = _gagpo_config(config, path)
    curve = [(step, _evaluation(step, metrics, record["env"]["name"])) for step, metrics in steps
             if "val/success_rate" in metrics]
    if not curve:
        return None
    curve.sort(key=lambda pair: pair[0])
    return record, curve


def find_verl_logs(paths: list[Path], run_dirs: list[Path]) -> list[Path]:
    """verl logs given in ``paths`` or found under them, outside gagpo's run directories: ``*.jsonl``,
    ``*.log`` / ``*.txt`` (a console log beside a JSONL of the same name only names its config), and
    wandb's ``run-*.wandb``."""
    runs = set(run_dirs)
    found: set[Path] = set()
    for root in map(Path, paths):
        files = [root] if root.is_file() else [p for pattern in ("*.jsonl", "*.log", "*.txt", "run-*.wandb")
                                                 for p in root.rglob(pattern)]
        for file in files:
            file = file.resolve()
            if runs.intersection(file.parents) or file.suffix not in (".jsonl", ".log", ".txt", ".wandb"):
                continue
            if file.suffix in (".log", ".txt") and file.with_suffix(".jsonl").is_file():
                continue
            found.add(file)
    return sorted(found)
