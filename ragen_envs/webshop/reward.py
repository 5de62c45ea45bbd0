"""WebShop's reward for a purchase (Yao et al. 2022):

    r = r_type * (matched attributes + matched options + [price <= limit]) / (n_attributes + n_options + 1)

- An attribute matches when it fuzzily matches one of the product's attributes (token-set ratio
  above 85) or appears in its title, features or description.
- An option matches when it is one of the chosen option values, up to case, punctuation and how a
  number is written (``8.0 fl. oz`` is ``8 fl oz``). WebShop's fuzzy ratio (above 85) takes "1 fl oz"
  for "8 fl oz", "pack of 1" for "pack of 12" and "x-large" for "xx-large", so a policy could buy the
  wrong size: a departure on purpose (goal options are values the product offers, written alike).
- ``r_type`` checks the product is the kind asked for: the share of the goal type's words found in
  the product's title decides (1 when enough, 0.5 without query, category or title agreement, 0.1
  below a tenth, 0 for none). WebShop parses nouns with spaCy; the goal type here is its noun phrase.
The fuzzy ratio is ``token_set_ratio`` written with ``difflib``, so scores are the same everywhere.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from ragen_envs.webshop.catalog import Goal, Product

THRESHOLD = 85


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _ratio(a: str, b: str) -> float:
    return 100.0 * SequenceMatcher(None, a, b).ratio() if a or b else 100.0


def token_set_ratio(a: str, b: str) -> float:
    """0..100: how alike two texts are as sets of words (100 when one set holds the other)."""
    x, y = set(_tokens(a)), set(_tokens(b))
    if not x or not y:
        return 0.0
    common = " ".join(sorted(x & y))
    only_x, only_y = " ".join(sorted(x - y)), " ".join(sorted(y - x))
    with_x, with_y = f"{common} {only_x}".strip(), f"{common} {only_y}".strip()
    if not common:
        return _ratio(with_x, with_y)
    return max(_ratio(common, with_x), _ratio(common, with_y), _ratio(with_x, with_y))


def type_reward(product: Product, goal: Goal) -> float:
    wanted = set(_tokens(goal.type))
    title_score = len(wanted & set(_tokens(product.title))) / len(wanted) if wanted else 0.2
    query_match = product.type == goal.type
    path = [p.strip().lower() for p in product.category.split("›")]
    goal_path = [p.strip().lower() for p in goal.category.split("›")]
    category_match = len(set(path) & set(goal_path)) >= 2
    r = 1.0 if query_match or category_match or title_score > 0.2 else 0.5
    if title_score < 0.1:
        r = 0.1
    if title_score == 0.0:
        r = 0.0
    return r


def attribute_matches(product: Product, goal: Goal) -> int:
    text = " ".join([product.title, " ".join(product.features), product.description]).lower()
    return sum(any(token_set_ratio(p, g) > THRESHOLD for p in product.attributes) or g.lower() in text
               for g in goal.attributes)


def _option_words(text: str) -> list:
    return [float(w) if w[0].isdigit() else w for w in re.findall(r"\d+(?:\.\d+)?|[a-z]+", text.lower())]


def option_match(chosen: str, wanted: str) -> bool:
    return _option_words(chosen) == _option_words(wanted)


def option_matches(chosen: list[str], goal: Goal) -> int:
    return sum(any(option_match(c, g) for c in chosen) for g in goal.options)


def reward(product: Product, chosen: list[str], goal: Goal) -> dict:
    """The purchase's reward and its parts."""
    r_type = type_reward(product, goal)
    attrs, opts = attribute_matches(product, goal), option_matches(chosen, goal)
    price_ok = product.price <= goal.price_upper
    total = r_type * (attrs + opts + price_ok) / (len(goal.attributes) + len(goal.options) + 1)
    return {"reward": total, "r_type": r_type, "attributes_matched": attrs, "options_matched": opts,
            "price_ok": price_ok}
