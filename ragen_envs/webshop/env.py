"""WebShop: find and buy the product an instruction describes, in a text web shop.

The shop has WebShop's pages (Yao et al. 2022): the search page; a results page (10 products a
page, ``Next >``, ``< Prev``, ``Back to Search``); a product page (options such as color and size,
title, price, ``Description``, ``Features``, ``Buy Now``, ``< Prev``); and description and feature
sub-pages.

Observation: the instruction and the page as text, its parts separated by ``[SEP]`` as in WebShop,
clickable elements in square brackets (``[Next >]``). With ``observation="ragen"`` (default) RAGEN's
nine lines of shopping advice follow (in our words) and the line "You must choose from these actions:"
with every action of the page; ``"page"`` shows the page alone. ``info["available_actions"]`` lists
them either way.

Action: ``search[query]`` or ``click[element]`` (a product id, an option value, a button;
case-insensitive). Other actions, by ``invalid_action``:
- ``"ignore"`` (default, RAGEN's): any text is stepped; one the page does not offer does nothing (no
  penalty), with ``info["action_is_valid"]`` False; a search works from any page (and is flagged
  invalid off the search page, as in RAGEN).
- ``"penalize"``: an action the page does not offer (a search off the search page too) is an invalid
  action: nothing happens and the agent loop's format penalty applies.
Empty text, control characters and text over 10,000 characters are invalid actions either way.

Reward: 0 until ``Buy Now``, which ends the episode. WebShop's score (``reward.py``):
``r_type * (matched attributes + matched options + [price <= limit]) / (attributes + options + 1)``,
in ``info["raw_reward"]`` with its parts. The reward, by ``reward``: ``"binary"`` (default, RAGEN's) 1
when the score is 1, else 0; ``"score"`` the score itself. Success: a score of 1. Truncated after
``max_steps`` (default 15).

Arguments:
- ``dataset``: ``"builtin"`` (default: 1,200 generated products in 6 categories, and goals built from
  them; ``catalog.py``) or a folder with WebShop's own JSON files (``items_shuffle.json`` and
  ``items_human_ins.json`` or ``items_ins_v2.json``), for users who have that data.
- ``split``: ``"train"`` or ``"test"``. Built-in goals: disjoint seeds. A folder's goals, by
  ``selection``: ``"ragen"`` (default) RAGEN's ranges over the goals in a seed-42 shuffle: train goal
  ``seed % (n - 1500) + 1500``, test (RAGEN's validation) ``seed % 1000 + 500``; ``"hash"``: an 80/20
  split by instruction, drawn by the env's generator.
- ``reward``, ``observation``, ``invalid_action`` (above), ``max_steps=15``, ``results_per_page=10``,
  ``max_results=50``, ``render_mode`` (``"ansi"`` or None); the bounds of the numbers: ``argument_bounds``
  (docs/envs.md's table).

Product search is BM25 over each product's title, type, category, attributes and features
(``ragen_envs.bm25``; one index per catalogue and process). ``reset(seed=s)`` picks the goal from ``s``;
``oracle_action()`` searches the goal's words, opens the target product, chooses its options and buys.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from ragen_envs import data
from ragen_envs.base import MAX_ANSWER_CHARS, MAX_STEPS, Bounds, TextEnv, check_positive_int, open_text, quoted
from ragen_envs.bm25 import shared_index
from ragen_envs.webshop import catalog
from ragen_envs.webshop.catalog import Goal, Product
from ragen_envs.webshop.reward import reward as webshop_score

ACTION = re.compile(r"\s*(search|click)\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
SEARCH, RESULTS, ITEM, DESCRIPTION, FEATURES = "search", "results", "item", "description", "features"
BACK, NEXT, PREV, BUY = "Back to Search", "Next >", "< Prev", "Buy Now"

# RAGEN's advice after each page (its RENDER_INSTRUCTIONS), said in our words
ADVICE = (
    "You have a limited number of actions: buy a product in time; it need not match the description exactly.",
    "Leave details such as size and color out of the search terms.",
    "Search two times at most.",
    "A close enough product bought in time beats a perfect one never found.",
    "Prefer a product on the current page to turning the page.",
    "Click next more than twice only in rare cases.",
    "Go back a page only when you are sure the product is there.",
    "With fewer than 3 actions left, buy the first product of the current page.",
    "Where a matching option exists, click the size, then the color, one at a time, before buy now; with one "
    "action left, just click buy now. Do not open the description.",
)
RAGEN_GOALS_HELD_OUT = 1500  # RAGEN's train goals start past the first 1,500 of the shuffle

INSTRUCTIONS = (
    "You are shopping in a web shop. Buy the product the instruction asks for, with the right options, "
    "under the price limit. Actions: search[query] on the search page, and click[element] for any element "
    "shown in [brackets]: a product id, an option value, Next >, < Prev, Back to Search, Description, "
    "Features, Buy Now. Buying ends the episode; the reward measures how well the product fits."
)
QUOTE_CHARS = 200  # the most of a query the page quotes back


class WebShopEnv(TextEnv):
    instructions = INSTRUCTIONS
    reset_options = ("goal",)
    agent_info_keys = ("available_actions",)  # the page's own links; not the purchase's score
    shared_on_copy = ("products", "_index", "_by_id")
    argument_bounds = {
        "max_steps": MAX_STEPS,
        "results_per_page": Bounds(min=1, max=50, why="products a results page lists"),
        "max_results": Bounds(min=1, max=1000, why="products a search ranks"),
    }

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_steps: int = 15,
                 results_per_page: int = 10, max_results: int = 50, render_mode: str | None = None,
                 reward: Literal["binary", "score"] = "binary", observation: Literal["ragen", "page"] = "ragen",
                 invalid_action: Literal["ignore", "penalize"] = "ignore",
                 selection: Literal["ragen", "hash"] = "ragen"):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        for name, value in (("results_per_page", results_per_page), ("max_results", max_results)):
            check_positive_int(name, value)
        self.per_page, self.max_results = results_per_page, max_results
        self.reward_rule, self.observation_rule, self.invalid_action = reward, observation, invalid_action
        self.split = split
        if isinstance(dataset, str) and dataset == "builtin":
            self.products = catalog.builtin_products()
            self.source = data.Source("builtin", split, (), "", None, generate=catalog.builtin_goal)
            key = ("webshop", "builtin")
        else:
            if split not in ("train", "test"):
                raise ValueError(f"split must be 'train' or 'test', got {split!r}")
            self.products, goals = catalog.load_webshop_folder(dataset)
            if selection == "ragen":
                self._goals = ragen_goal_order(goals, dataset)
                self.source = None
            else:  # the folder's goals, split here: shipped items of a source of their own
                mine = [g for g in goals if data.hash_split(g.instruction) == split] or goals
                self.source = data.Source("builtin", split, (), "", None, shipped=lambda: mine)
            key = ("webshop", str(dataset), len(self.products))
        self._by_id = {p.id.lower(): i for i, p in enumerate(self.products)}
        self._index = shared_index(key, lambda: [p.search_text() for p in self.products])
        self.goal: Goal | None = None
        self.outcome: dict = {}

    # -- episode state ---------------------------------------------------------------------------
    def _new_episode(self, options: dict[str, Any]) -> dict[str, Any]:
        goal = options.get("goal")
        if goal is not None and not isinstance(goal, Goal):
            raise ValueError("options['goal'] must be a ragen_envs.webshop.catalog.Goal")
        self.goal = goal or self._sample_goal()
        self.page, self.query, self.results, self.page_number = SEARCH, "", [], 1
        self.product: Product | None = None
        self.chosen: dict[str, str] = {}
        self.outcome = {}
        return {}

    def _sample_goal(self) -> Goal:
        if self.source is not None:
            return self.source.sample(self.np_random)
        n = len(self._goals)
        seed = self.reset_seed if self.reset_seed is not None else int(self.np_random.integers(1 << 31))
        held_out = RAGEN_GOALS_HELD_OUT
        index = seed % (n - held_out) + held_out if self.split == "train" else seed % 1000 + 500
        return self._goals[index]

    def clickables(self) -> list[str]:
        """The elements the current page offers to click."""
        if self.page == SEARCH:
            return []
        if self.page == RESULTS:
            first = (self.page_number - 1) * self.per_page
            shown = [self.products[i].id for i in self.results[first:first + self.per_page]]
            return [BACK] + ([PREV] if self.page_number > 1 else []) + \
                ([NEXT] if first + self.per_page < len(self.results) else []) + shown
        if self.page == ITEM:
            values = [v for group in self.product.options.values() for v in group]
            return [BACK, PREV, *values, "Description", "Features", BUY]
        return [BACK, PREV]

    def available_actions(self) -> list[str]:
        if self.page == SEARCH:
            return ["search[<your query>]"]
        return [f"click[{c}]" for c in self.clickables()]

    def _extra_info(self) -> dict[str, Any]:
        return {"available_actions": [] if self._terminated else self.available_actions(), **self.outcome}

    # -- actions ---------------------------------------------------------------------------------
    def parse_action(self, action: str) -> tuple[str, str, bool] | None:
        """(verb, argument, whether the page offers it); None for an invalid action."""
        text = open_text(action, MAX_ANSWER_CHARS)
        if text is None:
            return None
        ignore = self.invalid_action == "ignore"
        match = ACTION.fullmatch(text)
        argument = open_text(match.group(2), 500) if match else None
        if argument is not None and match.group(1).lower() == "search":
            if self.page == SEARCH or ignore:
                return "search", argument, self.page == SEARCH
        elif argument is not None:
            for element in self.clickables():
                if element.lower() == argument.lower():
                    return "click", element, True
        return ("nothing", text, False) if ignore else None

    def _is_valid(self, action: tuple[str, str, bool]) -> bool:
        return action[2]

    def _apply(self, action: tuple[str, str, bool]) -> tuple[float, bool, bool]:
        verb, target, _ = action
        if verb == "nothing":
            return 0.0, False, False
        if verb == "search":
            self.query = target
            self.results = [i for i, _ in self._index.search(target, self.max_results)]
            self.page, self.page_number = RESULTS, 1
        elif target == BACK:
            self.page, self.product, self.chosen = SEARCH, None, {}
        elif target == NEXT:
            self.page_number += 1
        elif target == PREV:
            if self.page == RESULTS:
                self.page_number -= 1
            elif self.page == ITEM:
                self.page, self.product, self.chosen = RESULTS, None, {}
            else:
                self.page = ITEM
        elif self.page == RESULTS:
            self.page, self.product, self.chosen = ITEM, self.products[self._by_id[target.lower()]], {}
        elif target in ("Description", "Features"):
            self.page = target.lower()
        elif target == BUY:
            self.outcome = webshop_score(self.product, list(self.chosen.values()), self.goal)
            score = self.outcome["raw_reward"] = self.outcome.pop("reward")
            self.outcome["bought"] = self.product.id
            return (float(score >= 1.0) if self.reward_rule == "binary" else score), True, True
        else:  # an option value: the first group that offers it
            group = next(g for g, values in self.product.options.items() if target in values)
            self.chosen[group] = target
        return 0.0, False, True

    # -- pages -----------------------------------------------------------------------------------
    def _text(self) -> str:
        page = self._page_text()
        if self.observation_rule == "page" or self._terminated:
            return page
        return (page + ".\n" + "\n".join(ADVICE) + "\nYou must choose from these actions: "
                + ", ".join(self.available_actions()) + ".")

    def _page_text(self) -> str:
        head = f"Instruction: [SEP] {self.goal.instruction}"
        if self.page == SEARCH:
            body = "[Search]" if not self.outcome else f"You bought {self.outcome['bought']}."
            return f"WebShop [SEP] {head} [SEP] {body}"
        if self.page == RESULTS:
            first = (self.page_number - 1) * self.per_page
            parts = [f"[{BACK}]", f"Page {self.page_number} (Total results: {len(self.results)})"]
            parts += [f"[{c}]" for c in (PREV, NEXT) if c in self.clickables()]
            for i in self.results[first:first + self.per_page]:
                p = self.products[i]
                parts += [f"[{p.id}]", p.title, f"${p.price:.2f}"]
            if not self.results:
                parts.append(f"No product matches '{quoted(self.query, QUOTE_CHARS)}'.")
            return " [SEP] ".join([head, *parts])
        p = self.product
        parts = [f"[{BACK}]", f"[{PREV}]"]
        if self.page == ITEM:
            for group, values in p.options.items():
                parts += [group, *(f"[{v}]" + (" (selected)" if self.chosen.get(group) == v else "") for v in values)]
            parts += [p.title, f"Price: ${p.price:.2f}", "Rating: N.A.", "[Description]", "[Features]", f"[{BUY}]"]
        elif self.page == DESCRIPTION:
            parts.append(p.description)
        else:
            parts += list(p.features)
        text = " [SEP] ".join([head, *parts])
        return text + (f"\nYou bought {p.id}." if self.outcome else "")

    def _is_success(self) -> bool:
        return self.outcome.get("raw_reward", 0.0) == 1.0

    def oracle_reasoning(self) -> str | None:
        action = self.oracle_action()
        if action is None:
            return None
        g = self.goal
        wanted = f"I need {', '.join(g.attributes)} {g.type} under ${g.price_upper:.0f}"
        if action.startswith("search["):
            return f"{wanted}, so I search for it."
        target = action[6:-1]
        if self.page == RESULTS:
            return (f"{wanted}. {target} on this page fits." if target == g.target
                    else f"{wanted}. It is not among these results; I go to {target}.")
        if target == BUY:
            chosen = ", ".join(self.chosen.values()) or "no option"
            return f"{wanted}. This is it, with {chosen} chosen; I buy it."
        if target in (PREV, BACK):
            return f"{wanted}. This page is not the product I want; I go back."
        return f"{wanted}. This is the product; I choose {target}."

    def oracle_action(self) -> str | None:
        """Search the goal's words, page to the target, open it, choose the wanted options, buy."""
        if self.goal is None or self._terminated:
            return None
        target = self.goal.target
        if self.page == SEARCH:
            return f"search[{self.goal.query}]"
        if self.page == RESULTS:
            clickables = self.clickables()
            if target in clickables:
                return f"click[{target}]"
            if NEXT in clickables:
                return f"click[{NEXT}]"
            return f"click[{BACK}]"
        if self.page != ITEM or self.product.id != target:
            return f"click[{PREV}]"
        offered = self.clickables()
        for value in self.goal.options:
            if value not in self.chosen.values() and value in offered:
                return f"click[{value}]"
        return f"click[{BUY}]"


def ragen_goal_order(goals: list[Goal], where: Any) -> list[Goal]:
    """The goals as RAGEN indexes them: shuffled by ``Random(42)``; its ranges need over 1,500 goals."""
    if len(goals) <= RAGEN_GOALS_HELD_OUT + 500:
        raise ValueError(f"{where}: RAGEN's goal ranges need over {RAGEN_GOALS_HELD_OUT + 500} goals, the folder "
                         f"has {len(goals)}; selection='hash' splits a smaller set")
    order = list(range(len(goals)))
    random.Random(42).shuffle(order)
    return [goals[i] for i in order]
