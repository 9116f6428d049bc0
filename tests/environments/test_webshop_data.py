"""WebShop data: the real-data reader on small files in the original formats, errors, and the generator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import run_cli

from environments.webshop import WebShopEnvironment
from environments.webshop.data import EMBEDDED_CATALOG, build_products, read_embedded
from environments.webshop.generate_catalog import build_catalog, catalog_bytes
from environments.webshop.generate_catalog import main as generate_main
from environments.webshop.goals import build_goals

N_WIDGETS = 25


def write_original_files(root: Path, human: bool = True) -> None:
    """Tiny WebShop data in the original file formats (with the quirks the loader must handle)."""
    products, attributes, reviews, human_ins = [], {}, [], {}
    for i in range(N_WIDGETS):
        asin = f"B0TEST{i:04d}"
        products.append({
            "asin": asin,
            "name": f"Acme Water Resistant Widget Model {i}",
            "full_description": f"Widget number {i}, sturdy and water resistant.",
            "small_description": [f"Feature line {i}", "Second line"] if i % 2 else f"Only line {i}",
            "pricing": "$10.00 - $20.00" if i == 0 else "" if i == 1 else f"${12 + i}.99",
            "customization_options": {"Color": [{"value": "Black/White", "image": "x.jpg"},
                                                {"value": "Red", "image": None}],
                                      "Size": [{"value": "Small", "image": None}, {"value": "Large", "image": None}]}
            if i % 3 else None,
            "images": [f"https://example.com/{i}.jpg"],
            "category": "electronics",
            "query": "Widget ",
            "product_category": "Electronics › Gadgets › Widgets",
        })
        if i != 2:  # product 2 has no attribute entry -> DUMMY_ATTR and no synthetic goal
            attributes[asin] = {"attributes": ["water resistant", "easy install"],
                                "instruction": f"i need a water resistant widget model {i}",
                                "instruction_attributes": ["water resistant"]}
        human_ins[asin] = [{"instruction": f"i want widget model {i} in red.",
                            "instruction_attributes": ["easy install"], "instruction_options": ["red"]}]
    products.append(dict(products[3]))  # a duplicate asin, skipped
    products.append({**products[4], "asin": "nan"})  # a bad asin, skipped
    reviews.append({"asin": "B0TEST0004", "average_rating": 4.5,
                    "reviews": [{"title": "Nice", "stars": 5, "review": "Works well"}]})
    (root / "items_shuffle_1000.json").write_text(json.dumps(products))
    (root / "items_ins_v2_1000.json").write_text(json.dumps(attributes))
    (root / "reviews.json").write_text(json.dumps(reviews))
    if human:
        (root / "items_human_ins.json").write_text(json.dumps(human_ins))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    write_original_files(tmp_path)
    return tmp_path


def test_real_files_are_normalised_like_the_original(data_dir):
    env = WebShopEnvironment(data_dir=str(data_dir))
    products = {p.asin: p for p in env.shop.products}
    assert len(products) == N_WIDGETS
    p0, p1, p4 = products["B0TEST0000"], products["B0TEST0001"], products["B0TEST0004"]
    assert p0.price_tag == "$10.0 to $20.0" and 10.0 <= p0.price <= 20.0
    assert p1.price_tag == "$100.0" and p1.price == 100.0
    assert p1.options == {"color": ("black | white", "red"), "size": ("small", "large")}
    assert products["B0TEST0003"].options == {}
    assert p1.query == "widget" and p1.bullet_points == ("Feature line 1", "Second line")
    assert products["B0TEST0002"].attributes == ("DUMMY_ATTR",)
    assert p4.rating == "4.5" and p4.reviews[0].score == "5"
    # synthetic goals: one per option combination, none for the product without an instruction
    expected = sum(4 if i % 3 else 1 for i in range(N_WIDGETS) if i != 2)
    assert env.num_tasks("test") == expected and env.num_tasks("train") == 0
    texts = [env.goal("test", t).instruction_text for t in range(expected)]
    assert "i need a water resistant widget model 1 with color: black | white, and size: small" in \
        [t.split(", and price")[0] for t in texts]


def test_same_engine_on_real_files(data_dir):
    env = WebShopEnvironment(data_dir=str(data_dir))
    episode = env.new_episode()
    reset = episode.reset("test", 0)
    results = episode.step("search[widget]")
    assert "Page 1 (Total results: 25) [SEP] Next >" in results.observation
    episode.step("click[next >]")
    last = episode.step("click[next >]")
    assert "Page 3 (Total results: 25) [SEP] < Prev [SEP] B0TEST" in last.observation
    assert "click[next >]" not in last.admissible_actions
    assert len([a for a in last.admissible_actions if a.startswith("click[b0test")]) == 5
    episode.step("click[back to search]")
    page = episode.step("search[widget model 4]")
    while "click[b0test0004]" not in page.admissible_actions:
        page = episode.step("click[next >]")
    episode.step("click[b0test0004]")
    reviews = episode.step("click[reviews]")
    assert reviews.observation.endswith('< Prev [SEP] "Nice" [SEP] 5 [SEP] Works well')
    wins = 0
    for t in range(env.num_tasks("test")):
        reset = episode.reset("test", t)
        while True:
            step = episode.step(episode.expert_action())
            if step.done:
                wins += step.won
                break
    assert wins == env.num_tasks("test")
    assert reset.task_type == "electronics"


def test_human_goals_env_var_and_num_products(data_dir, monkeypatch):
    monkeypatch.setenv("WEBSHOP_DATA", str(data_dir))
    env = WebShopEnvironment(human_goals=True)
    assert env.data_dir == str(data_dir)
    assert env.num_tasks("test") == N_WIDGETS
    goal = env.goal("test", 0)
    assert goal.goal_options == ("red",) and goal.attributes == ("easy install",)
    assert goal.instruction_text.startswith("i want widget model") and ". and" not in goal.instruction_text
    assert len(WebShopEnvironment(num_products=10).shop.products) == 10


def test_missing_data_dir_names_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        WebShopEnvironment(data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="items_shuffle.json"):
        WebShopEnvironment(data_dir=str(tmp_path))
    (tmp_path / "items_shuffle.json").write_text("[]")
    with pytest.raises(FileNotFoundError, match="items_ins_v2.json"):
        WebShopEnvironment(data_dir=str(tmp_path))


def test_malformed_files_name_the_file(tmp_path):
    (tmp_path / "items_shuffle.json").write_text("[{\"asin\": ")
    (tmp_path / "items_ins_v2.json").write_text("{}")
    with pytest.raises(ValueError, match="items_shuffle.json"):
        WebShopEnvironment(data_dir=str(tmp_path))
    (tmp_path / "items_shuffle.json").write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="items_shuffle.json: expected a list"):
        WebShopEnvironment(data_dir=str(tmp_path))
    (tmp_path / "items_shuffle.json").write_text("[]")
    with pytest.raises(FileNotFoundError, match="items_human_ins.json"):
        WebShopEnvironment(data_dir=str(tmp_path), human_goals=True)


def test_cli_turns_a_missing_data_dir_into_exit_2(tmp_path):
    code, _, err = run_cli(["eval", "--env", "webshop", "--episodes", "1", "-o", f"data_dir={tmp_path / 'absent'}"])
    assert code == 2
    assert "absent" in err and "Traceback" not in err


def test_generator_is_reproducible_and_matches_the_shipped_file(tmp_path):
    assert catalog_bytes(build_catalog(0)) == catalog_bytes(build_catalog(0))
    assert catalog_bytes(build_catalog(1)) != catalog_bytes(build_catalog(0))
    out = tmp_path / "catalog.json.gz"
    generate_main(["--out", str(out)])
    assert out.read_bytes() == EMBEDDED_CATALOG.read_bytes()


def test_embedded_catalog_size():
    raw = read_embedded()
    products = build_products(raw)
    assert len(products) >= 1000
    assert {p.category for p in products} == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert all(p.attributes and p.price > 0 and p.title for p in products)
    assert sum(bool(p.options) for p in products) > 0.8 * len(products)
    assert len(build_goals(products, raw.attributes, None)) >= 5000
    assert len(build_goals(products, raw.attributes, raw.human)) >= 5000
    assert EMBEDDED_CATALOG.stat().st_size < 3_000_000
