"""One in-memory catalog from either source: the embedded file or the original WebShop files.

Both sources are in the original formats (``items_shuffle*.json``, ``items_ins_v2*.json``,
``reviews.json``, ``items_human_ins.json``) and go through the same normalisation, which follows the
original loader: titles from ``name``, options lower-cased with ``/`` shown as `` | ``, a price tag
``$a`` or ``$a to $b``, ``DUMMY_ATTR`` when a product has no attribute list.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EMBEDDED_CATALOG = Path(__file__).parent / "data" / "catalog.json.gz"
DATA_ENV_VAR = "WEBSHOP_DATA"
PRODUCTS_FILE = "items_shuffle.json"
ATTRIBUTES_FILE = "items_ins_v2.json"
REVIEWS_FILE = "reviews.json"
HUMAN_FILE = "items_human_ins.json"


@dataclass(frozen=True)
class Review:
    title: str
    score: str
    body: str


@dataclass(frozen=True)
class Product:
    asin: str
    title: str
    query: str
    category: str
    product_category: str
    price: float  # the price the reward compares with the goal's upper bound
    price_tag: str  # what pages show: "$12.99" or "$10.0 to $20.0"
    description: str
    bullet_points: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]  # option name -> values, page order
    reviews: tuple[Review, ...]
    rating: str


@dataclass
class RawData:
    """The original files' content before normalisation."""

    products: list[dict[str, Any]]
    attributes: dict[str, Any]
    reviews: list[dict[str, Any]]
    human: dict[str, Any] | None


def _read_json(path: Path) -> Any:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"malformed WebShop data file {path}: {e}") from None


def _pick(data_dir: Path, stem: str, suffix: str = "") -> Path:
    """``stem.json`` if present, else ``stem<suffix>.json`` (e.g. ``_1000``), else the first ``stem*.json``."""
    for name in (f"{stem}.json", f"{stem}{suffix}.json"):
        if (data_dir / name).is_file():
            return data_dir / name
    found = sorted(data_dir.glob(f"{stem}*.json"))
    if not found:
        raise FileNotFoundError(f"WebShop data file not found: expected {data_dir / (stem + '.json')} "
                                f"(or {stem}_*.json, e.g. {stem}_1000.json)")
    return found[0]


def read_real_files(data_dir: str | os.PathLike[str], human_goals: bool) -> RawData:
    """Read the original WebShop files from ``data_dir``; errors name the file that was expected."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"WebShop data directory not found: {root} "
                                f"(expected it to hold {PRODUCTS_FILE} and {ATTRIBUTES_FILE})")
    products_path = _pick(root, "items_shuffle")
    suffix = products_path.stem[len("items_shuffle"):]
    attributes_path = _pick(root, "items_ins_v2", suffix)
    products = _read_json(products_path)
    attributes = _read_json(attributes_path)
    if not isinstance(products, list) or not all(isinstance(p, dict) and "asin" in p for p in products):
        raise ValueError(f"malformed WebShop data file {products_path}: expected a list of products with 'asin'")
    if not isinstance(attributes, dict):
        raise ValueError(f"malformed WebShop data file {attributes_path}: expected an object keyed by asin")
    reviews = _read_json(root / REVIEWS_FILE) if (root / REVIEWS_FILE).is_file() else []
    human = None
    if human_goals:
        if not (root / HUMAN_FILE).is_file():
            raise FileNotFoundError(f"WebShop data file not found: expected {root / HUMAN_FILE} (human_goals=True)")
        human = _read_json(root / HUMAN_FILE)
        if not isinstance(human, dict):
            raise ValueError(f"malformed WebShop data file {root / HUMAN_FILE}: expected an object keyed by asin")
    return RawData(products, attributes, reviews, human)


def read_embedded(path: Path = EMBEDDED_CATALOG) -> RawData:
    """Read the shipped catalog written by ``generate_catalog``."""
    blob = _read_json(path)
    return RawData(blob["products"], blob["attributes"], blob["reviews"], blob["human_instructions"])


def resolve_data_dir(data_dir: str | None) -> str | None:
    """The explicit option, else ``$WEBSHOP_DATA``, else None (the embedded catalog)."""
    return data_dir if data_dir is not None else (os.environ.get(DATA_ENV_VAR) or None)


def _parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """Original rule: numbers after each ``$``; none -> $100.0; two or more -> a range of the first two."""
    if not pricing:
        return [100.0], "$100.0"
    values = []
    for part in str(pricing).split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", part)
        try:
            values.append(float(digits))
        except ValueError:
            continue
    if not values:
        return [100.0], "$100.0"
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def _price(asin: str, pricing: list[float]) -> float:
    """One price per product; for a range the original draws uniformly, here seeded by the asin."""
    if len(pricing) == 1:
        return pricing[0]
    return random.Random(f"price:{asin}").uniform(pricing[0], pricing[1])


def _options(customization: Any) -> dict[str, tuple[str, ...]]:
    options: dict[str, tuple[str, ...]] = {}
    if not isinstance(customization, dict):
        return options
    for name, contents in customization.items():
        if not contents:
            continue
        values = [str(c.get("value", "")).strip().replace("/", " | ").lower() for c in contents]
        options[name.lower()] = tuple(v for v in values if v)
    return options


def _reviews(records: list[dict[str, Any]]) -> dict[str, tuple[tuple[Review, ...], str]]:
    out = {}
    for r in records:
        reviews = tuple(
            Review(
                str(x.get("title", "")),
                str(x.get("score", x.get("stars", ""))),
                str(x.get("body", x.get("review", ""))),
            )
            for x in r.get("reviews", [])
        )
        out[r["asin"]] = (reviews, str(r.get("average_rating", "N.A.")))
    return out


def build_products(raw: RawData, num_products: int | None = None) -> list[Product]:
    """Normalise the original product records (first ``num_products``, duplicates and bad asins skipped)."""
    records = raw.products[:num_products] if num_products is not None else raw.products
    reviews = _reviews(raw.reviews)
    seen: set[str] = set()
    products = []
    for p in records:
        asin = str(p["asin"])
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        pricing, tag = _parse_pricing(p.get("pricing"))
        bullets = p.get("small_description") or []
        attrs = (raw.attributes.get(asin) or {}).get("attributes") or ["DUMMY_ATTR"]
        product_reviews, rating = reviews.get(asin, ((), "N.A."))
        products.append(Product(
            asin=asin,
            title=str(p.get("name", "")),
            query=str(p.get("query", "")).lower().strip(),
            category=str(p.get("category", "")),
            product_category=str(p.get("product_category", "")),
            price=_price(asin, pricing),
            price_tag=tag,
            description=str(p.get("full_description") or ""),
            bullet_points=tuple(str(b) for b in (bullets if isinstance(bullets, list) else [bullets])),
            attributes=tuple(str(a) for a in attrs),
            options=_options(p.get("customization_options")),
            reviews=product_reviews,
            rating=rating,
        ))
    return products
