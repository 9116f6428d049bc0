"""Candidate search queries built from the instruction, so that every WebShop step has a finite set of
admissible actions (option ``search_queries``; used by policies that rank actions instead of writing
them). The rule is fixed and the same for every policy:

1. the *request*: the instruction without its opening ("i need", "get me", "i'm looking for", ...)
   and leading article, without the price clause ("and price lower than 50.00 dollars") and without punctuation;
2. the *product phrase*: the request up to its first option ("with color: ...") or relative clause
   ("which is ...", "that are ...");
3. the request's first four words;
4. the request's content words (stop words left out), in order;
5. the last three words of the product phrase (usually the product's noun: "hair extension").

Duplicates and empty queries are dropped; the first N remain.
"""

from __future__ import annotations

import re

_OPENINGS = re.compile(
    r"^(i('m| am) (also )?looking for|i('d| would) like|i (want|need)( to buy| to find)?|get me|find me|buy me|"
    r"show me|search for|look for|can you find( me)?|please find( me)?)\s+", re.I)
_PRICE = re.compile(r",?\s*(and )?price (lower|less) than [\d.,]+ dollars\.?", re.I)
_CUT = re.compile(r"\s(with [a-z ]+:|which |that |who |,)", re.I)
_STOP = frozenset({"a", "an", "the", "some", "and", "or", "of", "for", "with", "which", "that", "is", "are", "be",
                   "it", "its", "to", "in", "on", "me", "my", "i", "you", "color", "size", "style", "flavor",
                   "name", "scent", "pack", "count"})


def _clean(text: str) -> str:
    text = re.sub(r"[^a-z0-9.\-' ]+", " ", text.lower())
    return " ".join(text.split())


def candidate_queries(instruction: str, n: int) -> tuple[str, ...]:
    """Up to ``n`` distinct search queries for ``instruction`` by the module's rule (n <= 0: none)."""
    if n <= 0:
        return ()
    text = _PRICE.sub("", instruction.strip())
    text = _OPENINGS.sub("", text.strip())
    text = re.sub(r"^(a|an|some|the)\s+", "", text, flags=re.I)
    product = _CUT.split(" " + text, maxsplit=1)[0]
    request = _clean(text)
    product = _clean(product)
    words = request.split()
    content = [w for w in words if w not in _STOP and not w.endswith(":")]
    queries = [request, product, " ".join(words[:4]), " ".join(content), " ".join(product.split()[-3:])]
    out: list[str] = []
    for q in queries:
        q = q.strip(" .-'")
        if q and q not in out:
            out.append(q)
    return tuple(out[:n])
