"""The oracle shopper: knows the goal's target product and buys it with the wanted options.

From the start page it searches with the instruction's words (without the price clause), falling
back to the target's title when the instruction does not retrieve the target; it pages to the target,
opens it, clicks each wanted option value not yet chosen, and buys. From any other product or
sub-page it goes back. On the embedded catalog this earns reward 1.0 by construction.
"""

from __future__ import annotations

from environments.webshop import pages
from environments.webshop.engine import Session
from environments.webshop.goals import Goal
from environments.webshop.reward import FUZZY_THRESHOLD, fuzzy_score

_PRICE_CLAUSE = ", and price lower than"


def expert_query(session: Session) -> str:
    goal, shop = session.goal, session.shop
    target = shop.index[goal.asin.lower()]
    candidates = (
        goal.instruction_text.split(_PRICE_CLAUSE)[0],
        shop.products[target].title,
        f"{shop.products[target].title} {goal.query}",
    )
    for query in candidates:
        if target in shop.search.search(query.lower()):
            return query.lower()
    return candidates[0].lower()


def wanted_options(session: Session, goal: Goal) -> list[tuple[str, str]]:
    """(option name, value) pairs of the product to click for the goal's option values."""
    pairs: dict[str, str] = {}  # one value per option name, else the clicks would undo each other
    offered = [(name, v) for name, values in session.product.options.items() for v in values]
    for want in goal.goal_options:
        exact = [(n, v) for n, v in offered if v == want]
        best = exact[-1] if exact else max(offered, key=lambda nv: fuzzy_score(want, nv[1]), default=None)
        if best is not None and best[0] not in pairs and (exact or fuzzy_score(want, best[1]) > FUZZY_THRESHOLD):
            pairs[best[0]] = best[1]
    return list(pairs.items())


def expert_action(session: Session) -> str:
    goal = session.goal
    target_asin = goal.asin.lower()
    if session.page == "start":
        return f"search[{expert_query(session)}]"
    if session.page == "results":
        target = session.shop.index[target_asin]
        if target not in session.hits:
            return f"click[{pages.BACK_TO_SEARCH.lower()}]"
        wanted_page = session.hits.index(target) // pages.PRODUCTS_PER_PAGE + 1
        if wanted_page == session.page_number:
            return f"click[{target_asin}]"
        return f"click[{(pages.NEXT_PAGE if wanted_page > session.page_number else pages.PREV_PAGE).lower()}]"
    if session.page == "item":
        if session.product.asin.lower() != target_asin:
            return f"click[{pages.PREV_PAGE.lower()}]"
        for name, value in wanted_options(session, goal):
            if session.options.get(name) != value:
                return f"click[{value}]"
        return f"click[{pages.BUY_NOW.lower()}]"
    if session.page == "done":
        return f"click[{pages.BUY_NOW.lower()}]"  # nothing is left to do; any action is a no-op
    return f"click[{pages.PREV_PAGE.lower()}]"
