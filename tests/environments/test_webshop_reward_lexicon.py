"""The WordNet-derived noun lexicon: its build rules on a hand-written mini WordNet, and the shipped file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from environments.webshop import generate_lexicon as gl
from environments.webshop import nouns

MINI = {  # WordNet index lines: lemma pos synset_cnt p_cnt [pointers] sense_cnt tagsense_cnt offsets
    "index.noun": ["  1 license header line", "table n 6 2 @ ~ 6 5 01", "free n 1 1 @ 1 0 02",
                   "olive n 4 1 @ 4 0 03", "bar n 15 2 @ ~ 15 6 04", "ice_cream n 1 1 @ 1 1 05"],
    "index.adj": ["free a 9 1 ! 9 5 11", "olive a 1 1 & 1 2 12", "soft a 5 1 ! 5 3 13"],
    "index.verb": ["table v 2 1 @ 2 1 21", "wash v 9 1 @ 9 4 22", "stop v 9 1 @ 9 2 23", "bar v 4 1 @ 4 1 24",
                   "run v 41 1 @ 41 30 25", "carry v 40 1 @ 40 17 26"],
    "index.adv": ["quickly r 1 0 1 1 31"],
    "noun.exc": [], "verb.exc": ["ran run"], "adj.exc": ["softer soft"],
}


@pytest.fixture()
def mini_wordnet(tmp_path: Path) -> Path:
    for name, lines in MINI.items():
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return tmp_path


def test_build_rules_on_a_mini_wordnet(mini_wordnet: Path):
    words = set(gl.non_nouns(mini_wordnet))
    # verb forms by the spelling rules, irregular forms, adjectives and adverbs
    assert {"wash", "washes", "washed", "washing", "stopped", "stopping", "ran", "carries", "carried"} <= words
    assert {"soft", "softer", "quickly"} <= words
    # a noun lemma or plural is never listed, even when it is also a verb; its verb-only forms are
    assert not {"table", "tables", "bar", "bars"} & words
    assert {"tabled", "tabling", "barred"} <= words
    # never tagged as a noun but tagged as an adjective: listed; colour names are exempt
    assert "free" in words and "olive" not in words
    assert "ice_cream" not in words and all(w.isalpha() and w.islower() for w in words)


def test_written_file_is_deterministic_and_carries_the_license(mini_wordnet: Path, tmp_path: Path):
    words = gl.non_nouns(mini_wordnet)
    first, second = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    gl.write(words, first)
    gl.write(words, second)
    assert first.read_bytes() == second.read_bytes()
    with gzip.open(first, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["words"] == words and "Princeton University" in doc["license"]


def test_main_rejects_a_folder_without_wordnet(tmp_path: Path, capsys):
    assert gl.main([str(tmp_path)]) == 2
    assert "usage" in capsys.readouterr().out


def test_shipped_lexicon_loads_and_has_the_license():
    with gzip.open(nouns.LEXICON, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["license"] == gl.WORDNET_LICENSE
    assert nouns.non_nouns() == frozenset(doc["words"]) and len(doc["words"]) > 40_000


@pytest.mark.skipif(not Path("/usr/share/wordnet/index.noun").is_file(), reason="WordNet 3.0 files not installed")
def test_shipped_lexicon_is_what_the_generator_builds():
    assert sorted(nouns.non_nouns()) == gl.non_nouns(Path("/usr/share/wordnet"))
