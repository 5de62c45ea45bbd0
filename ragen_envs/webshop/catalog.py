"""The shop's products and the shopping goals, generated offline from word lists of our own (WebShop's
scraped data is licensed for non-commercial research only, so none of it is shipped).

A product has an id, a category path, a type (its noun, e.g. "running shoes"), a title, a price,
attributes ("non slip", "memory foam"), option groups ("color": [...], "size": [...]), a description
and feature bullets. A goal is built from a target product: some of its attributes, one value of
some of its option groups, and a price limit above its price:
"Find me non slip, memory foam running shoes with color: black and size: 9, and price lower than 60
dollars". ``load_webshop_folder`` reads the real data instead, from a folder the user provides.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from ragen_envs.once import build_once


@dataclass(frozen=True)
class Product:
    id: str
    category: str  # "Clothing › Shoes › Running Shoes"
    type: str  # "running shoes": what the shopper asks for
    title: str
    price: float
    attributes: tuple[str, ...]
    options: dict = field(hash=False)  # group -> list of values
    description: str = ""
    features: tuple[str, ...] = ()

    def search_text(self) -> str:
        return " ".join([self.title, self.type, self.category.replace("›", " "), " ".join(self.attributes),
                         " ".join(self.features)])


@dataclass(frozen=True)
class Goal:
    instruction: str
    target: str  # the product the goal was built from
    type: str
    category: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # wanted option values
    price_upper: float
    query: str  # a search that finds the target (the oracle's)


# (category path, types with base prices, attributes, option groups)
CATEGORIES = [
    ("Clothing › Shoes", {"running shoes": 60, "hiking boots": 90, "sandals": 30, "sneakers": 55, "slippers": 20},
     ["non slip", "lightweight", "water resistant", "arch support", "memory foam", "breathable", "wide fit",
      "rubber sole"],
     {"color": ["black", "white", "navy", "grey", "red", "olive"], "size": ["6", "7", "8", "9", "10", "11", "12"]}),
    ("Clothing › Tops", {"t-shirt": 15, "hoodie": 35, "sweater": 40, "polo shirt": 25, "tank top": 12},
     ["cotton", "machine washable", "slim fit", "long sleeve", "moisture wicking", "relaxed fit", "organic",
      "quick dry"],
     {"color": ["black", "white", "heather grey", "forest green", "burgundy", "sky blue"],
      "size": ["small", "medium", "large", "x-large", "xx-large"]}),
    ("Home › Kitchen", {"coffee mug": 12, "frying pan": 35, "water bottle": 18, "cutting board": 22, "teapot": 28},
     ["dishwasher safe", "bpa free", "non stick", "stainless steel", "heat resistant", "leak proof", "bamboo",
      "induction compatible"],
     {"color": ["black", "white", "teal", "red", "silver"], "capacity": ["12 oz", "16 oz", "24 oz", "32 oz"]}),
    ("Electronics › Audio", {"headphones": 70, "bluetooth speaker": 45, "earbuds": 40, "soundbar": 120,
                             "microphone": 55},
     ["noise cancelling", "wireless", "long battery life", "waterproof", "usb c charging", "foldable",
      "built in microphone", "low latency"],
     {"color": ["black", "white", "blue", "rose gold"], "style": ["standard", "pro", "travel case bundle"]}),
    ("Beauty › Skin Care", {"face cream": 25, "sunscreen": 15, "lip balm": 6, "body lotion": 14, "face serum": 30},
     ["fragrance free", "vegan", "for sensitive skin", "paraben free", "hydrating", "spf 30", "cruelty free",
      "oil free"],
     {"scent": ["unscented", "lavender", "citrus", "coconut"], "size": ["1 fl oz", "2 fl oz", "4 fl oz", "8 fl oz"]}),
    ("Grocery › Snacks", {"granola bar": 8, "trail mix": 10, "green tea": 9, "dark chocolate": 7, "coffee beans": 16},
     ["gluten free", "organic", "non gmo", "low sugar", "kosher", "high protein", "fair trade", "keto friendly"],
     {"flavor": ["original", "honey almond", "sea salt", "mint", "vanilla"],
      "size": ["pack of 1", "pack of 3", "pack of 6", "pack of 12"]}),
]
BRANDS = ["Northpeak", "Bluefern", "Cindervale", "Larkspur", "Quillon", "Harbor & Finch", "Mossgate", "Tidewell",
          "Brightlane", "Oakhaven", "Solvy", "Emberline", "Pinecrest", "Velora", "Stonebrook", "Kestrel"]
AUDIENCES = ["for men", "for women", "for kids", "unisex", "for home", "for travel", "for everyday use", ""]
PRODUCT_COUNT = 1200


def _product(rng: random.Random, index: int) -> Product:
    path, types, attributes, groups = rng.choice(CATEGORIES)
    kind = rng.choice(sorted(types))
    attrs = tuple(rng.sample(attributes, rng.randint(2, 4)))
    options = {group: sorted(rng.sample(values, rng.randint(2, min(5, len(values)))), key=values.index)
               for group, values in groups.items()}
    brand, audience = rng.choice(BRANDS), rng.choice(AUDIENCES)
    shown = " ".join(a.title() for a in attrs[:2])
    title = f"{brand} {shown} {kind.title()} {audience}".strip()
    price = max(round(types[kind] * rng.uniform(0.6, 1.6)), 2) - 0.01  # $59.99
    description = (f"The {brand} {kind} is made to last. It is {', '.join(attrs)}. Choose your "
                   f"{' and '.join(options)} below.")
    notes = ["tested for daily use", "a customer favourite", "made with care"]
    features = tuple(f"{a.capitalize()}: {rng.choice(notes)}" for a in attrs)
    pid = "B0" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(8))
    return Product(pid, f"{path} › {kind.title()}", kind, title, round(price, 2), attrs, options, description,
                   features)


def _goal(rng: random.Random, product: Product) -> Goal:
    attrs = tuple(rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes)))))
    groups = rng.sample(sorted(product.options), rng.randint(1, len(product.options)))
    options = tuple(rng.choice(product.options[g]) for g in groups)
    price_upper = float(math.ceil(product.price * rng.uniform(1.05, 1.6) / 10) * 10)
    wanted = ", ".join(f"{g}: {v}" for g, v in zip(groups, options))
    instruction = (f"Find me {', '.join(attrs)} {product.type} with {wanted}, and price lower than "
                   f"{price_upper:.0f} dollars")
    return Goal(instruction, product.id, product.type, product.category, attrs, options, price_upper,
                f"{' '.join(attrs)} {product.type}")


@build_once
def builtin_products() -> tuple[Product, ...]:
    rng = random.Random(20221)
    products, seen = [], set()
    while len(products) < PRODUCT_COUNT:
        product = _product(rng, len(products))
        if product.id not in seen:
            seen.add(product.id)
            products.append(product)
    return tuple(products)


def builtin_goal(rng: random.Random) -> Goal:
    """A goal for a random product of the built-in catalogue (goal i of a split from Random(base + i))."""
    products = builtin_products()
    return _goal(rng, products[rng.randrange(len(products))])


# -- the real WebShop data, from the user's own copy ------------------------------------------------------
def load_webshop_folder(folder: str | Path) -> tuple[tuple[Product, ...], list[Goal]]:
    """Products and goals from WebShop-format JSON files in ``folder``: ``items_shuffle.json`` (products)
    and ``items_human_ins.json`` or ``items_ins_v2.json`` (instructions). A ValueError says what is missing."""
    folder = Path(folder).expanduser()
    items_path = folder / "items_shuffle.json"
    if not items_path.is_file():
        raise ValueError(f"{folder}: no items_shuffle.json (WebShop's product file)")
    try:
        items = json.loads(items_path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{items_path} is not JSON ({error})") from None
    products = []
    for i, item in enumerate(items):
        try:
            products.append(_webshop_product(item))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{items_path}: item {i} lacks what a product needs ({error})") from None
    by_id = {p.id: p for p in products}
    goals = []
    for name in ("items_human_ins.json", "items_ins_v2.json"):
        path = folder / name
        if not path.is_file():
            continue
        instructions = json.loads(path.read_text())
        for asin, entries in instructions.items():
            product = by_id.get(asin)
            for entry in entries if isinstance(entries, list) else [entries]:
                if product is None or not isinstance(entry, dict) or not entry.get("instruction"):
                    continue
                price_upper = float(math.ceil(product.price * 1.5 / 10) * 10)
                instruction = entry["instruction"].rstrip(".") + f", and price lower than {price_upper:.0f} dollars"
                goals.append(Goal(instruction, asin, product.type, product.category,
                                  tuple(entry.get("instruction_attributes") or product.attributes[:1]),
                                  tuple(entry.get("instruction_options") or ()), price_upper, product.type))
        if goals:
            break
    if not goals:
        raise ValueError(f"{folder}: no instructions (items_human_ins.json or items_ins_v2.json) for its products")
    return tuple(products), goals


def _webshop_product(item: dict) -> Product:
    price = item.get("pricing") or item.get("Price") or "0"
    if isinstance(price, list):
        price = price[0]
    value = float(str(price).replace("$", "").replace(",", "").split()[0].split("-")[0] or 0)
    options = {group: [o["value"] if isinstance(o, dict) else str(o) for o in values]
               for group, values in (item.get("customization_options") or {}).items()}
    name = item.get("name") or item["Title"]
    return Product(item["asin"], item.get("product_category", ""), str(item.get("query") or name).lower(), name,
                   value, tuple(a.lower() for a in item.get("Attributes") or ()), options,
                   item.get("full_description") or item.get("Description") or "",
                   tuple(item.get("small_description") or item.get("BulletPoints") or ()))
