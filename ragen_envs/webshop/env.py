"""WebShop: find and buy the product an instruction describes, in a text web shop.

The shop has WebShop's pages (Yao et al. 2022): the search page; a results page (10 products a
page, ``Next >``, ``< Prev``, ``Back to Search``); a product page (options such as color and size,
title, price, ``Description``, ``Features``, ``Buy Now``, ``< Prev``); and description and feature
sub-pages.

Observation: the instruction and the page as text, its parts separated by ``[SEP]`` as in WebShop,
clickable elements in square brackets (``[Next >]``). ``info["available_actions"]`` lists every valid
action of the page.

Action: ``search[query]`` (on the search page) or ``click[element]`` (a product id, an option value,
a button; case-insensitive). An action the page does not offer changes nothing and is flagged invalid.

Reward: 0 until ``Buy Now``, which ends the episode with WebShop's reward (``reward.py``):
``r_type * (matched attributes + matched options + [price <= limit]) / (attributes + options + 1)``.
``info`` then holds its parts. Success: a reward of 1. Truncated after ``max_steps`` (default 15).

Arguments:
- ``dataset``: ``"builtin"`` (default: 1,200 generated products in 6 categories, and goals built from
  them; ``catalog.py``) or a folder with WebShop's own JSON files (``items_shuffle.json`` and
  ``items_human_ins.json`` or ``items_ins_v2.json``), for users who have that data.
- ``split``: ``"train"`` or ``"test"`` (built-in goals: disjoint seeds; a folder: an 80/20 split).
- ``max_steps=15``, ``results_per_page=10``, ``max_results=50``, ``render_mode`` (``"ansi"`` or None).

Product search is BM25 over each product's title, type, category, attributes and features
(``ragen_envs.bm25``; one index per catalogue and process). ``reset(seed=s)`` picks the goal from ``s``;
``oracle_action()`` searches the goal's words, opens the target product, chooses its options and buys.
"""

from __future__ import annotations

import re
from typing import Any

from ragen_envs import data
from ragen_envs.base import TextEnv, check_positive_int, open_text
from ragen_envs.bm25 import shared_index
from ragen_envs.webshop import catalog
from ragen_envs.webshop.catalog import Goal, Product
from ragen_envs.webshop.reward import reward

ACTION = re.compile(r"\s*(search|click)\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)
SEARCH, RESULTS, ITEM, DESCRIPTION, FEATURES = "search", "results", "item", "description", "features"
BACK, NEXT, PREV, BUY = "Back to Search", "Next >", "< Prev", "Buy Now"

INSTRUCTIONS = (
    "You are shopping in a web shop. Buy the product the instruction asks for, with the right options, "
    "under the price limit. Actions: search[query] on the search page, and click[element] for any element "
    "shown in [brackets]: a product id, an option value, Next >, < Prev, Back to Search, Description, "
    "Features, Buy Now. Buying ends the episode; the reward measures how well the product fits."
)


class WebShopEnv(TextEnv):
    instructions = INSTRUCTIONS

    def __init__(self, dataset: Any = "builtin", split: str = "train", max_steps: int = 15,
                 results_per_page: int = 10, max_results: int = 50, render_mode: str | None = None):
        super().__init__(max_steps=max_steps, render_mode=render_mode)
        for name, value in (("results_per_page", results_per_page), ("max_results", max_results)):
            check_positive_int(name, value)
        self.per_page, self.max_results = results_per_page, max_results
        if isinstance(dataset, str) and dataset == "builtin":
            self.products = catalog.builtin_products()
            self.source = data.Source("builtin", split, (), "", None, generate=catalog.builtin_goal)
            key = ("webshop", "builtin")
        else:
            if split not in ("train", "test"):
                raise ValueError(f"split must be 'train' or 'test', got {split!r}")
            self.products, goals = catalog.load_webshop_folder(dataset)
            # The folder's goals, split here: shipped items of a source of their own.
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
        self.goal = goal or self.source.sample(self.np_random)
        self.page, self.query, self.results, self.page_number = SEARCH, "", [], 1
        self.product: Product | None = None
        self.chosen: dict[str, str] = {}
        self.outcome = {}
        return {}

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
    def parse_action(self, action: str) -> tuple[str, str] | None:
        match = ACTION.fullmatch(action)
        if match is None:
            return None
        verb, argument = match.group(1).lower(), open_text(match.group(2), 500)
        if argument is None:
            return None
        if verb == "search":
            return ("search", argument) if self.page == SEARCH else None
        for element in self.clickables():
            if element.lower() == argument.lower():
                return "click", element
        return None

    def _apply(self, action: tuple[str, str]) -> tuple[float, bool, bool]:
        verb, target = action
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
            self.outcome = reward(self.product, list(self.chosen.values()), self.goal)
            self.outcome["bought"] = self.product.id
            return self.outcome["reward"], True, True
        else:  # an option value: the first group that offers it
            group = next(g for g, values in self.product.options.items() if target in values)
            self.chosen[group] = target
        return 0.0, False, True

    # -- pages -----------------------------------------------------------------------------------
    def _text(self) -> str:
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
                parts.append(f"No product matches {self.query!r}.")
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
        return self.outcome.get("reward", 0.0) == 1.0

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
