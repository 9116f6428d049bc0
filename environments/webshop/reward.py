"""The original WebShop reward (``web_agent_site/engine/goal.py``), re-implemented.

    reward = r_type * (matched attributes + matched options + [price <= price_upper])
                    / (len(goal attributes) + len(goal options) + 1)

Fuzzy matching uses rapidfuzz's ``token_set_ratio`` with the preprocessing and integer rounding of
``thefuzz`` (the library the original calls), so "> 85" means the same thing.

The type reward compares the nouns of the bought product's title with those of the target's title.
The original tags nouns with spaCy's ``en_core_web_lg``, which cannot be installed offline. The
documented substitute, ``title_nouns``, keeps the lower-cased alphabetic words of a title minus
English stop words, words of one letter, and words that are almost never nouns in product titles
(adverbs and adjectives recognised by suffix or from a short list). It is a superset-leaning
approximation: it keeps some adjectives spaCy would drop, so title scores between unrelated products
stay near 0 and identical titles still score 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from environments.webshop.data import Product
from environments.webshop.goals import Goal

EXACT_MATCH_OPTIONS = ("size",)  # option names compared exactly, not fuzzily (as in the original)
FUZZY_THRESHOLD = 85

_COLORS = sorted({
    "alabaster", "apricot", "aqua", "ash", "auburn", "azure", "beige", "berry", "black", "blonde", "blue",
    "blush", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "chocolate",
    "clear", "cognac", "copper", "coral", "cream", "denim", "espresso", "fuchsia", "gold", "gray", "green",
    "grey", "indigo", "ivory", "khaki", "lavender", "leopard", "lilac", "lime", "magenta", "maroon", "mauve",
    "mint", "navy", "nude", "olive", "orange", "peach", "pink", "plum", "purple", "red", "rose", "ruby",
    "sage", "sand", "silver", "tan", "taupe", "teal", "turquoise", "violet", "walnut", "white", "wine",
    "yellow",
})
_STOPWORD_TEXT = """
a an and are as at be but by for from has have if in into is it its of on or per so such that the their
then there these they this to too up was were will with without you your our we i me my all any both each
few more most other some only own same than very can just also not no nor out over under again off once
"""
_NON_NOUN_TEXT = """
new best great good high low long short large small big mini extra super ultra premium natural free
soft hard light dark heavy quick easy fast slow hot cold warm cool fresh pure real raw full half double
single multi non anti pro plus original classic modern vintage compatible adjustable portable waterproof
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_NON_NOUNS = frozenset(_NON_NOUN_TEXT.split())
_NON_NOUN_SUFFIXES = ("ly", "ous", "ful", "less", "ive", "able", "ible")


def normalize_color(value: str) -> str:
    """The first known colour word contained in ``value`` (alphabetical order), else ``value`` unchanged."""
    for color in _COLORS:
        if color in value:
            return color
    return value


def title_nouns(title: str) -> set[str]:
    """Noun-like words of a title (the spaCy-free substitute documented above)."""
    words = re.findall(r"[a-z]+", title.lower())
    return {
        w for w in words
        if len(w) > 1 and w not in _STOPWORDS and w not in _NON_NOUNS and not w.endswith(_NON_NOUN_SUFFIXES)
    }


def fuzzy_score(a: str, b: str) -> int:
    """``thefuzz.fuzz.token_set_ratio``: ASCII only, lower-cased, punctuation as spaces, rounded."""
    a = default_process(a.encode("ascii", "ignore").decode())
    b = default_process(b.encode("ascii", "ignore").decode())
    if not a or not b:
        return 0
    return int(round(fuzz.token_set_ratio(a, b)))


def _in_text(needle: str, product: Product) -> bool:
    return (needle in product.title.lower() or needle in " ".join(product.bullet_points).lower()
            or needle in product.description.lower())


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal) -> TypeReward:
    """1.0 for the same kind of product; lowered to 0.5 / 0.1 / 0.0 as the titles share fewer nouns."""
    query_match = product.query == goal.query
    bought_path = {x.strip() for x in product.product_category.split("›")}
    wanted_path = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought_path & wanted_path) >= 2
    wanted = title_nouns(goal.name)
    title_score = len(title_nouns(product.title) & wanted) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def attribute_matches(product: Product, goal: Goal) -> int:
    """Goal attributes found among the product's attributes (fuzzy) or in its title/features/description."""
    matches = 0
    for wanted in goal.attributes:
        if any(fuzzy_score(have, wanted) > FUZZY_THRESHOLD for have in product.attributes) or _in_text(
                wanted, product):
            matches += 1
    return matches


def option_matches(product: Product, goal: Goal, chosen: dict[str, str]) -> int:
    """Chosen options that match a goal option (exactly for size, else fuzzy) or appear in the text."""
    wanted = [normalize_color(o) for o in goal.goal_options]
    matches = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in wanted
        else:
            matched = any(fuzzy_score(w, value) > FUZZY_THRESHOLD for w in wanted)
        if matched or _in_text(value, product):
            matches += 1
    return matches


def get_reward(product: Product, goal: Goal, chosen: dict[str, str]) -> tuple[float, dict[str, float]]:
    """The raw WebShop score in [0, 1] of buying ``product`` with options ``chosen``, and its parts."""
    typed = type_reward(product, goal)
    r_price = product.price <= goal.price_upper if goal.price_upper > 0 else 0
    n_attr = attribute_matches(product, goal)
    n_opt = option_matches(product, goal, chosen)
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    reward = typed.r_type * (n_attr + n_opt + r_price) / denominator
    info = {
        "r_type": typed.r_type,
        "title_score": typed.title_score,
        "query_match": float(typed.query_match),
        "category_match": float(typed.category_match),
        "r_att": n_attr / len(goal.attributes) if goal.attributes else 0.0,
        "r_option": n_opt / len(goal.goal_options) if goal.goal_options else 1.0,
        "r_price": float(r_price),
    }
    return reward, info

