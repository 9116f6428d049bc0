"""WebShop behind the environment protocol (``environments.base``).

Data source: ``data_dir`` (or ``$WEBSHOP_DATA``) with the original files, else the embedded catalog
shipped in ``data/catalog.json.gz``. Same engine, pages, reward and splits for both.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar

from environments.base import Environment, Episode, Reset, Step, TableColumn
from environments.webshop import data
from environments.webshop.engine import SEARCH_TEMPLATE, Session, Shop
from environments.webshop.expert import expert_action
from environments.webshop.goals import Goal, build_goals, split_goals
from environments.webshop.queries import candidate_queries
from environments.webshop.reward import REWARD_MODES

CATEGORIES = ("beauty", "electronics", "fashion", "food", "furniture")  # the original's five categories


@lru_cache(maxsize=4)
def _load(data_dir: str | None, human_goals: bool, num_products: int | None) -> tuple[Shop, dict[str, list[Goal]]]:
    """Catalog, search index and splits; cached so several environments in one process share them."""
    raw = data.read_real_files(data_dir, human_goals) if data_dir is not None else data.read_embedded()
    products = data.build_products(raw, num_products)
    goals = build_goals(products, raw.attributes, raw.human if human_goals else None)
    return Shop.build(products), split_goals(goals)


class WebShopEnvironment(Environment):
    """The WebShop benchmark (text mode).

    Options: ``data_dir`` (directory with ``items_shuffle*.json`` and ``items_ins_v2*.json``, optional
    ``reviews.json`` and ``items_human_ins.json``; default ``$WEBSHOP_DATA``, else the embedded
    catalog), ``human_goals`` (use the human-written instructions), ``num_products`` (use only the
    first N products, like the original option), ``reward`` (``original``: the original ``get_reward``,
    quirks included, the default; ``fixed``: with the corrections listed in ``reward.py``),
    ``search_queries`` (N > 0: the search box is offered as ``search[q]`` for N candidate queries built
    from the instruction by ``queries.py``'s rule instead of the ``search[<your query>]`` template, so
    the action set is finite; what score mode applies by default). Raises
    ``FileNotFoundError``/``ValueError`` naming the expected file when the data is missing or malformed.
    """

    description: ClassVar[str] = "WebShop: find and buy the product an instruction describes (text mode)"
    max_steps: ClassVar[int] = 15
    task_types: ClassVar[tuple[str, ...]] = CATEGORIES
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    score_mode_options: ClassVar[dict[str, Any]] = {"search_queries": 4}
    role: ClassVar[str] = (
        "You are an expert shopping agent on a text-based online store (WebShop). You search the catalog, "
        "open products, choose their options and buy the one item that matches the instruction."
    )
    presets: ClassVar[dict[str, dict[str, Any]]] = {"table1": {"env.max_steps": 15}}  # the paper's budget
    table_columns: ClassVar[tuple[TableColumn, ...]] = (
        TableColumn("WebShop Score", ("score",), "webshop/score"),
        TableColumn("WebShop Succ.", ("success_rate",), "webshop/success", overall=True),
    )

    def __init__(self, data_dir: str | None = None, human_goals: bool = False, num_products: int | None = None,
                 reward: str = "original", search_queries: int = 0, **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"unknown webshop option(s) {sorted(unknown)}; valid: data_dir, human_goals, "
                             "num_products, reward, search_queries")
        if isinstance(search_queries, bool) or not isinstance(search_queries, int) or search_queries < 0:
            raise ValueError(f"search_queries must be an integer >= 0, got {search_queries!r}")
        self.search_queries = search_queries
        if not isinstance(human_goals, bool):
            raise ValueError(f"human_goals must be true or false, got {human_goals!r}")
        if num_products is not None and (not isinstance(num_products, int) or num_products < 1):
            raise ValueError(f"num_products must be a positive integer, got {num_products!r}")
        if reward not in REWARD_MODES:
            raise ValueError(f"webshop option reward must be one of {', '.join(REWARD_MODES)}, got {reward!r}")
        self.reward_mode = reward
        resolved = data.resolve_data_dir(data_dir)
        self.data_dir = str(resolved) if resolved is not None else None
        self.human_goals = human_goals
        self.shop, self.goals = _load(self.data_dir, self.human_goals, num_products)

    def num_tasks(self, split: str) -> int:
        return len(self._split(split))

    def _split(self, split: str) -> list[Goal]:
        if split not in self.goals:
            raise ValueError(f"unknown webshop split {split!r}; valid: {', '.join(self.splits)}")
        return self.goals[split]

    def split_task_types(self, split: str) -> tuple[str, ...]:
        """The product category of every goal of ``split``, in task id order."""
        return tuple(goal.category for goal in self._split(split))

    def goal(self, split: str, task_id: int) -> Goal:
        """The goal of task ``task_id`` in ``split``."""
        goals = self._split(split)
        if not 0 <= task_id < len(goals):
            raise ValueError(f"webshop task_id {task_id} out of range for split {split!r} (0..{len(goals) - 1})")
        return goals[task_id]

    def new_episode(self) -> WebShopEpisode:
        return WebShopEpisode(self)


class WebShopEpisode(Episode):
    """One shopping session. ``seed`` has no effect: the engine has no randomness."""

    def __init__(self, env: WebShopEnvironment) -> None:
        self.env = env
        self.session: Session | None = None

    def reset(self, split: str, task_id: int, seed: int = 0) -> Reset:
        goal = self.env.goal(split, task_id)
        self.session = Session(self.env.shop, goal, self.env.reward_mode)
        return Reset(
            observation=self.session.observation,
            admissible_actions=self._admissible(),
            task_type=goal.category,
            state_key=self.session.observation,
            goal=goal.instruction_text,
            task_id=task_id,
        )

    def _session(self) -> Session:
        if self.session is None:
            raise RuntimeError("WebShopEpisode.reset must be called before step")
        return self.session

    def step(self, action: str) -> Step:
        s = self._session()
        try:
            outcome = s.act(action)
        except Exception as e:  # an engine bug must not take the whole rollout down (protocol: crashed)
            return Step(observation=s.observation, reward=0.0, done=True, won=False, score=0.0, valid=False,
                        admissible_actions=(), state_key=s.observation, crashed=True,
                        extra={"error": f"{type(e).__name__}: {e}"})
        extra: dict[str, Any] = {
            "page": s.page,
            "asin": s.product.asin if s.product is not None else None,
            "selected_options": dict(s.options),
        }
        if outcome.reward_info is not None:
            extra["reward_info"] = outcome.reward_info
        finished = s.page == "done"
        return Step(
            observation=s.observation,
            reward=outcome.reward,
            done=finished,
            won=finished and s.reward == 1.0,
            score=s.reward if finished else 0.0,
            valid=outcome.valid,
            admissible_actions=self._admissible(),
            state_key=s.observation,
            extra=extra,
        )

    def _admissible(self) -> tuple[str, ...]:
        """The session's actions; with ``search_queries``, the search template becomes candidate queries."""
        actions = self._session().admissible_actions()
        n = self.env.search_queries
        if n <= 0 or not actions or actions[0] != SEARCH_TEMPLATE:
            return actions
        queries = candidate_queries(self._session().goal.instruction_text, n)
        return tuple(f"search[{q}]" for q in queries) + actions[1:]

    def expert_action(self) -> str:
        return expert_action(self._session())
