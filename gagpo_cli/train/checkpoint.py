"""Checkpoints: everything needed to continue a run exactly where it stopped.

Layout (``<run>/checkpoints/iter_000010/`` = the state after 10 completed iterations)::

    policy/          Policy.save: LoRA adapter or full weights (safetensors)
    sharded/         model.parallel fsdp: the trained weights and optimizer state, one file per rank
                     (torch.distributed.checkpoint), in rank 0's checkpoint only
    trainer.pt       Updater.state_dict: optimizer (and critic) state; no optimizer under fsdp
    rng.json         python / numpy / torch random states
    manifest.json    iteration + sha256 of every other file (written last)

A checkpoint is written into a hidden temporary folder and renamed into place, so a folder named
``iter_*`` is always complete; a run killed mid-save leaves only a ``.tmp-*`` folder, ignored and
cleaned up by the next save. A save that fails (a full disk) removes its temporary folder and is one
line naming the checkpoint and the space it needs (``write_errors``). Loading re-hashes every file: a
missing, unreadable or altered file is a ``UsageError`` naming it. Only the newest ``KEEP``
checkpoints are kept.

``newest_intact_checkpoint`` (what ``--resume`` uses) walks back from the newest checkpoint to the
newest one that verifies; every corrupt one it passes is renamed ``corrupt-iter_*`` (never deleted,
never listed as a checkpoint again) and reported through its ``say`` callback.

Data parallel (``model.parallel: ddp`` under torchrun): every rank holds the same weights and optimizer
state, so only rank 0 writes ``policy/`` and ``trainer.pt`` (a full fine-tune's are ~18 GB for 1.5B);
the other ranks' checkpoints hold their random states, and a resume hands rank 0's weights and
optimizer state to them by broadcast (``distributed.state_from_main``: no shared filesystem needed).

Sharded policies (``model.parallel: fsdp``): saving and loading are collectives, every rank calls them
for the same iteration. Each rank keeps its own checkpoint folder (its random states;
``distributed.rank_config``), every rank writes its shard into ``sharded/`` of RANK 0's folder (so the
ranks share a filesystem: one host), rank 0 writes the gathered ``policy/``, and a resume reads the
shards from rank 0's folder. The shards load on any number of ranks (``sharding.load_sharded``
reshards them), but a resume on another number deals the batch differently: it continues correctly,
not identically to an uninterrupted run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gagpo_cli.errors import UsageError
from gagpo_cli.run_layout import ITERATION_PREFIX, RunLayout, iteration_of
from gagpo_cli.write_errors import is_space_error, write_failure

KEEP = 2
MANIFEST = "manifest.json"
POLICY_DIR = "policy"  # Policy.save / load_weights
TRAINER_FILE = "trainer.pt"
RNG_FILE = "rng.json"
SHARDED_DIR = "sharded"  # fsdp: every rank's shard of the weights and optimizer state
CORRUPT_PREFIX = "corrupt-"


def checkpoint_dir(run_dir: Path) -> Path:
    """The folder holding a run's checkpoints."""
    return RunLayout(run_dir).checkpoints


def checkpoint_path(run_dir: Path, iteration: int) -> Path:
    """Where the checkpoint of ``iteration`` lives (whether or not it exists)."""
    return RunLayout(run_dir).checkpoint(iteration)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------- random states


def capture_rng() -> dict[str, Any]:
    """The global random states (python, numpy, torch CPU and CUDA) as JSON-safe data."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode()
                         for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of ``capture_rng``."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["torch"])), dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(
            [torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8) for s in state["cuda"]]
        )


# ---------------------------------------------------------------------------- save


def save_checkpoint(run_dir: Path, iteration: int, policy: Any, updater: Any,
                    rng_state: dict[str, Any]) -> Path:
    """Write the checkpoint of ``iteration`` (policy weights, updater state, ``rng_state``) atomically.

    ``policy`` is a ``Policy`` (``save``), ``updater`` an ``Updater`` (``state_dict``). Returns the
    checkpoint folder. Older checkpoints beyond ``KEEP`` and stale temporary folders are removed.
    """
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f".tmp-{ITERATION_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = checkpoint_path(run_dir, iteration)
    tmp = root / f".tmp-{final.name}"
    tmp.mkdir()
    try:
        _write_checkpoint(tmp, iteration, policy, updater, rng_state)
    except BaseException as exc:  # nothing half-written stays; a full disk is one line naming the folder
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) or is_space_error(exc):
            previous = latest_checkpoint(run_dir)
            kept = (f"the run's checkpoint {previous.name} is kept: free some space and continue with --resume"
                    if previous is not None else "free some space and start the run again with --resume")
            raise write_failure(final, exc, _checkpoint_bytes(previous, policy, updater), kept) from None
        raise
    if final.exists():  # a resumed run saving the same iteration again
        shutil.rmtree(final)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_checkpoint(tmp: Path, iteration: int, policy: Any, updater: Any, rng_state: dict[str, Any]) -> None:
    """Fill the temporary folder ``tmp``: weights, updater state, random states, then the manifest."""
    if getattr(policy, "sharded", False):  # fsdp: this rank's shard into rank 0's folder
        from gagpo_cli.train import sharding

        main_tmp = _main_rank_path(tmp, policy.shard_ctx)
        sharding.save_sharded(main_tmp / SHARDED_DIR, policy.model, updater.optimizer, policy.shard_ctx)
    if not _replica(policy):  # ddp: rank 0's weights and optimizer state are every rank's
        policy.save(tmp / POLICY_DIR)
        torch.save(updater.state_dict(), tmp / TRAINER_FILE)
    (tmp / RNG_FILE).write_text(json.dumps(rng_state), encoding="utf-8")
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    manifest = {
        "iteration": iteration,
        "files": {str(p.relative_to(tmp)): _sha256(p) for p in files},
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")


def _checkpoint_bytes(previous: Path | None, policy: Any, updater: Any) -> int | None:
    """About what a checkpoint takes: the run's previous one, else its trainable weights and updater
    state (None when neither can be measured)."""
    if previous is not None:
        return sum(p.stat().st_size for p in previous.rglob("*") if p.is_file())
    try:
        tensors = [t for t in _tensors(updater.state_dict())]
        tensors += [p for p in policy.model.parameters() if p.requires_grad]
        return sum(t.numel() * t.element_size() for t in tensors) or None
    except Exception:  # a policy without .model, an updater without tensors: the size stays unknown
        return None


def _tensors(state: Any) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for value in state.values() for t in _tensors(value)]
    if isinstance(state, (list, tuple)):
        return [t for value in state for t in _tensors(value)]
    return []


# ---------------------------------------------------------------------------- load


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders of a run, oldest first."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and iteration_of(p.name) is not None]
    return sorted(found, key=checkpoint_iteration)


def checkpoint_iteration(path: Path) -> int:
    """The number of completed iterations a checkpoint folder holds (``iter_000010`` -> 10)."""
    return int(path.name[len(ITERATION_PREFIX):])


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint folder of a run, or None when it has none."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Read the manifest and check every file's sha256; returns the manifest.

    Raises ``UsageError`` naming the manifest or the file that is missing, unreadable or altered.
    """
    manifest_path = Path(path) / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
        iteration = int(manifest["iteration"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"corrupt checkpoint: cannot read manifest {manifest_path} "
                         f"({type(exc).__name__})") from None
    if not files or iteration < 0:
        raise UsageError(f"corrupt checkpoint: manifest {manifest_path} lists no files")
    for rel, expected in files.items():
        file = Path(path) / rel
        try:
            actual = _sha256(file)
        except OSError as exc:
            raise UsageError(f"corrupt checkpoint: cannot read {file} ({type(exc).__name__})") from None
        if actual != expected:
            raise UsageError(f"corrupt checkpoint: {file} does not match its sha256 in {manifest_path}")
    return manifest


@dataclass
class Restored:
    """What ``load_checkpoint`` hands back besides the weights it loads in place."""

    iteration: int
    rng_state: dict[str, Any]
    path: Path


def load_checkpoint(path: Path, policy: Any, updater: Any) -> Restored:
    """Verify ``path``, load the policy weights and updater state into the given objects."""
    manifest = verify_checkpoint(path)
    path = Path(path)
    if getattr(policy, "sharded", False):  # fsdp: weights and optimizer state from rank 0's shards
        _load_shards(path, policy, updater)
    elif not _replica(policy):
        try:
            policy.load_weights(path / POLICY_DIR)
        except (OSError, ValueError, RuntimeError) as exc:
            raise UsageError(f"corrupt checkpoint: cannot load weights from {path / POLICY_DIR} "
                             f"({exc})") from None
    if not _replica(policy):
        try:
            updater.load_state_dict(torch.load(path / TRAINER_FILE, map_location="cpu", weights_only=True))
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise UsageError(f"corrupt checkpoint: cannot load {path / TRAINER_FILE} ({exc})") from None
    _replicas_from_main(policy, updater)
    try:
        rng_state = json.loads((path / RNG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"corrupt checkpoint: cannot read {path / RNG_FILE} ({exc})") from None
    return Restored(iteration=int(manifest["iteration"]), rng_state=rng_state, path=path)


def _replica(policy: Any) -> bool:
    """Whether this process is a data-parallel replica (ddp, rank > 0): its weights and optimizer state
    are rank 0's, so its checkpoints hold only its own random states."""
    from gagpo_cli.train import distributed

    return distributed.current().rank > 0 and not getattr(policy, "sharded", False)


def _replicas_from_main(policy: Any, updater: Any) -> None:
    """ddp: rank 0's loaded weights and optimizer state to every rank (broadcasts: no shared filesystem
    needed). Every rank calls it; one process or fsdp: nothing."""
    from gagpo_cli.train import distributed

    ctx = distributed.current()
    if not ctx.enabled or getattr(policy, "sharded", False):
        return
    distributed.tensors_from_main(policy.trainable_parameters(), ctx)
    state = distributed.state_from_main(updater.state_dict() if ctx.is_main else None, ctx)
    if not ctx.is_main:
        updater.load_state_dict(state)


def _main_rank_path(path: Path, ctx: Any) -> Path:
    """Rank 0's ``path`` (every rank calls it; one host, so one filesystem)."""
    from gagpo_cli.train.distributed import gather

    return Path(gather(str(Path(path).resolve()), ctx)[0])


def _load_shards(path: Path, policy: Any, updater: Any) -> None:
    """Load the sharded weights and optimizer state of rank 0's checkpoint of the same iteration (every
    rank calls it)."""
    from gagpo_cli.train import sharding

    shards = _main_rank_path(path, policy.shard_ctx) / SHARDED_DIR
    try:
        sharding.load_sharded(shards, policy.model, updater.optimizer)
    except (OSError, ValueError, RuntimeError) as exc:
        raise UsageError(f"corrupt checkpoint: cannot load the sharded weights from {shards} "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None


def set_aside(path: Path) -> Path:
    """Rename a corrupt checkpoint folder to ``corrupt-<name>`` (``-2``, ``-3``... if taken); returns
    the new path. The folder is kept for inspection and is no longer listed as a checkpoint."""
    path = Path(path)
    target = path.with_name(CORRUPT_PREFIX + path.name)
    n = 2
    while target.exists():
        target = path.with_name(f"{CORRUPT_PREFIX}{path.name}-{n}")
        n += 1
    path.rename(target)
    return target


def newest_intact_checkpoint(run_dir: Path, say: Any = print) -> Path | None:
    """The newest checkpoint of ``run_dir`` whose files all match their manifest, or None.

    Each newer checkpoint that fails ``verify_checkpoint`` is set aside (``set_aside``) and
    ``say(message)`` is called once for it, naming the problem and where the folder now is.
    """
    for path in reversed(list_checkpoints(run_dir)):
        try:
            verify_checkpoint(path)
            return path
        except UsageError as exc:
            kept = set_aside(path)
            say(f"checkpoint {path.name} is unusable ({exc}); kept it as {kept}")
    return None
