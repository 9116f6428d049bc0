"""Text of every WebShop page, in the original ``text`` observation mode.

The original renders HTML and joins its visible text nodes with `` [SEP] ``; these functions emit the
same sequence of texts directly. Each returns ``(text, clickables)`` where clickables are the
lower-cased click targets of the page, in the original's order (buttons, product links, options).
"""

from __future__ import annotations

from environments.webshop.data import Product

SEP = " [SEP] "
PRODUCTS_PER_PAGE = 10
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")


def _header(instruction: str) -> list[str]:
    return ["Instruction:", instruction]


def start_page(instruction: str) -> tuple[str, list[str]]:
    """The search page: only the search bar (its button is not clickable as an action)."""
    return SEP.join(["WebShop", *_header(instruction), "Search"]), []


def results_page(instruction: str, hits: list[Product], page: int, total: int) -> tuple[str, list[str]]:
    """Search results ``page`` (10 per page) out of ``total`` hits."""
    parts = [*_header(instruction), BACK_TO_SEARCH, f"Page {page} (Total results: {total})"]
    clickables = [BACK_TO_SEARCH.lower()]
    if page > 1:
        parts.append(PREV_PAGE)
        clickables.append(PREV_PAGE.lower())
    if page * PRODUCTS_PER_PAGE < total:
        parts.append(NEXT_PAGE)
        clickables.append(NEXT_PAGE.lower())
    for p in hits:
        parts += [p.asin, p.title, p.price_tag]
        clickables.append(p.asin.lower())
    return SEP.join(parts), clickables


def item_page(instruction: str, p: Product) -> tuple[str, list[str]]:
    """A product: options (name then values), title, price, rating, sub-page buttons, Buy Now.

    As in the original text mode, the page does not show which options are selected.
    """
    parts = [*_header(instruction), BACK_TO_SEARCH, PREV_PAGE]
    option_values: list[str] = []
    for name, values in p.options.items():
        parts += [name, *values]
        option_values += values
    parts += [p.title, f"Price: {p.price_tag}", f"Rating: {p.rating}", *SUB_PAGES, BUY_NOW]
    buttons = [BACK_TO_SEARCH.lower(), PREV_PAGE.lower(), *(s.lower() for s in SUB_PAGES), BUY_NOW.lower()]
    return SEP.join(parts), buttons + list(dict.fromkeys(v for v in option_values if v not in buttons))


def sub_page(instruction: str, p: Product, which: str) -> tuple[str, list[str]]:
    """Description, Features or Reviews of a product, with Back to Search and < Prev (to the item)."""
    if which == "description":
        body = [p.description] if p.description else []
    elif which == "features":
        body = list(p.bullet_points) if p.bullet_points else ["No Features"]
    else:
        body = [x for r in p.reviews for x in (f'"{r.title}"', r.score, r.body)] or ["No reviews found"]
    parts = [*_header(instruction), BACK_TO_SEARCH, PREV_PAGE, *(b for b in body if b)]
    return SEP.join(parts), [BACK_TO_SEARCH.lower(), PREV_PAGE.lower()]


def done_page(reward: float) -> tuple[str, list[str]]:
    """After Buy Now (the original's hidden MTurk details are left out)."""
    return SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{reward}"]), []
