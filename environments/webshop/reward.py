"""The WebShop reward: the original ``get_reward`` (``web_agent_site/engine/goal.py``) and a corrected variant.

    reward = r_type * (matched attributes + matched options + [price <= price_upper])
                    / (len(goal attributes) + len(goal options) + 1)

``mode="original"`` (the default) reproduces the original, quirks included:

* fuzzy matches are thefuzz 0.19's ``token_set_ratio`` > 85 (``fuzz.py``: its preprocessing, difflib
  ratio and integer rounding);
* an attribute matches when a product attribute fuzzy-matches it, or when it occurs in the product's
  title, features (bullet points) or description;
* a goal option matches when some chosen option value fuzzy-matches it, ``size`` included; the
  product's text is not consulted for options; colours are normalised first (``colors.py``), and for
  goals whose options the original keeps as a dict (every synthetic goal) the goal side is a
  ``(name, value)`` pair: it is normalised only when the value *is* a colour word, and otherwise is
  compared as the text ``"('size', 'large')"``, so "x-large" no longer matches "large";
* the type term: ``title_score`` = |set(bought nouns) & set(wanted nouns)| / len(wanted nouns), where
  the wanted list keeps repeated nouns; spaCy's tagging is replaced by ``nouns.title_nouns``.

``mode="fixed"`` keeps these corrections (the quirks they replace are above):

1. ``size`` options must equal the goal's value exactly (fuzzy matching gives "12 fl oz (pack of 2)"
   full credit for "12 fl oz");
2. a chosen option value that occurs in the product's title, features or description counts as
   matched, as attributes do;
3. colours are normalised on the goal's option values, never on (name, value) pairs;
4. the type term counts each wanted title noun once (no weight for repeats);
5. a purchase matches at most as many options as the goal has (counted per chosen option).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from environments.webshop.colors import normalize_color
from environments.webshop.data import Product
from environments.webshop.fuzz import token_set_ratio, token_set_ratio_above
from environments.webshop.goals import Goal
from environments.webshop.nouns import title_nouns

RewardMode = Literal["original", "fixed"]
REWARD_MODES: tuple[str, ...] = ("original", "fixed")
FUZZY_THRESHOLD = 85  # a fuzzy match needs token_set_ratio > 85, as in the original
EXACT_MATCH_OPTIONS = ("size",)  # mode "fixed": option names compared exactly


def fuzzy_score(a: Any, b: Any) -> int:
    """thefuzz 0.19 ``token_set_ratio`` (0..100), the original's fuzzy score."""
    return token_set_ratio(a, b)


def fuzzy_match(a: Any, b: Any) -> bool:
    """``fuzzy_score(a, b) > FUZZY_THRESHOLD``."""
    return token_set_ratio_above(a, b, FUZZY_THRESHOLD)


def _in_text(needle: str, product: Product) -> bool:
    return (needle in product.title.lower() or needle in " ".join(product.bullet_points).lower()
            or needle in product.description.lower())


def _check_mode(mode: str) -> None:
    if mode not in REWARD_MODES:
        raise ValueError(f"unknown webshop reward {mode!r}; valid: {', '.join(REWARD_MODES)}")


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal, mode: RewardMode = "original") -> TypeReward:
    """1.0 for the same kind of product; lowered to 0.5 / 0.1 / 0.0 as the titles share fewer nouns."""
    _check_mode(mode)
    query_match = product.query == goal.query
    bought_path = {x.strip() for x in product.product_category.split("›")}
    wanted_path = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought_path & wanted_path) >= 2
    wanted = title_nouns(goal.name)
    if mode == "fixed":
        wanted = list(dict.fromkeys(wanted))
    shared = set(title_nouns(product.title)) & set(wanted)
    title_score = len(shared) / len(wanted) if wanted else 0.2
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
    return sum(
        1 for wanted in goal.attributes
        if any(fuzzy_match(have, wanted) for have in product.attributes) or _in_text(wanted, product))


def _original_option_matches(goal: Goal, chosen: dict[str, str]) -> int:
    bought = [normalize_color(v) for v in chosen.values()]
    wanted: list[Any] = list(goal.goal_options)
    if goal.option_names is not None:  # the original passes dict.items(): (name, value) pairs
        wanted = list(zip(goal.option_names, goal.goal_options, strict=True))
    wanted = [normalize_color(w) for w in wanted]
    return sum(1 for w in wanted if any(fuzzy_match(b, w) for b in bought))


def _fixed_option_matches(product: Product, goal: Goal, chosen: dict[str, str]) -> int:
    wanted = [normalize_color(o) for o in goal.goal_options]
    matches = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        exact = name.lower() in EXACT_MATCH_OPTIONS
        matched = value in wanted if exact else any(fuzzy_match(w, value) for w in wanted)
        if matched or _in_text(value, product):
            matches += 1
    return min(matches, len(goal.goal_options))


def option_matches(product: Product, goal: Goal, chosen: dict[str, str], mode: RewardMode = "original") -> int:
    """How many of the goal's options the purchase (``chosen``: option name -> value) satisfies."""
    _check_mode(mode)
    if mode == "original":
        return _original_option_matches(goal, chosen)
    return _fixed_option_matches(product, goal, chosen)


def get_reward(product: Product, goal: Goal, chosen: dict[str, str],
               mode: RewardMode = "original") -> tuple[float, dict[str, float]]:
    """The raw WebShop score in [0, 1] of buying ``product`` with options ``chosen``, and its parts."""
    typed = type_reward(product, goal, mode)
    r_price = product.price <= goal.price_upper if goal.price_upper > 0 else 0
    n_attr = attribute_matches(product, goal)
    n_opt = option_matches(product, goal, chosen, mode)
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    reward = (n_attr + n_opt + r_price) / denominator * typed.r_type  # the original's order of operations
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
