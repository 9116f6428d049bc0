"""Keyword search over the catalog with BM25 (``bm25s``), replacing the original's pyserini index.

Documents are built as in the original indexer: title, description, first feature line and the
option text, lower-cased. A query returns at most 50 products with a positive score, best first,
ties broken by catalog order, so results are deterministic. Results are cached per query string.
"""

from __future__ import annotations

import re
from functools import lru_cache

import bm25s
import numpy as np

from environments.webshop.data import Product

SEARCH_RETURN_N = 50
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def document_text(p: Product) -> str:
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in p.options.items())
    first_feature = p.bullet_points[0] if p.bullet_points else ""
    return " ".join([p.title, p.description, first_feature, option_text]).lower()


class SearchEngine:
    """BM25 over the products; ``search(query)`` -> indices into the product list."""

    def __init__(self, products: list[Product], cache_size: int = 65536) -> None:
        corpus = [document_text(p) for p in products]
        tokens = bm25s.tokenize(corpus, stopwords="en", show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(tokens, show_progress=False)
        self._vocab = tokens.vocab
        self._stopwords = set(bm25s.stopwords.STOPWORDS_EN)
        self.search = lru_cache(maxsize=cache_size)(self._search)

    def _search(self, query: str) -> tuple[int, ...]:
        words = [w for w in _TOKEN.findall(query.lower()) if w not in self._stopwords and w in self._vocab]
        if not words:
            return ()
        scores = self._bm25.get_scores(words)
        n = min(SEARCH_RETURN_N, len(scores))
        threshold = np.partition(scores, len(scores) - n)[len(scores) - n]
        candidates = np.nonzero((scores >= threshold) & (scores > 0))[0]
        order = np.lexsort((candidates, -scores[candidates]))  # best score first, then catalog order
        return tuple(int(i) for i in candidates[order][:n])
