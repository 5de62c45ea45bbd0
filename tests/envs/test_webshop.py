"""WebShop: pages and actions, WebShop's reward on hand-built cases, RAGEN's rules (binary reward, advice
and action list, no-op invalid actions, goal ranges) and ours, the generated catalogue, and the real
data's folder format."""

import json

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.webshop import catalog
from ragen_envs.webshop.catalog import Goal, Product
from ragen_envs.webshop.reward import option_match, reward, token_set_ratio

SHOE = Product("B0SHOE0001", "Clothing › Shoes › Running Shoes", "running shoes",
               "Northpeak Non Slip Lightweight Running Shoes for men", 49.99, ("non slip", "lightweight", "breathable"),
               {"color": ["black", "white"], "size": ["8", "9"]}, "Made to last. It is water resistant.",
               ("Arch support: tested",))
MUG = Product("B0MUG00001", "Home › Kitchen › Coffee Mug", "coffee mug", "Bluefern Coffee Mug", 9.99,
              ("dishwasher safe",), {"color": ["red"]}, "", ())
GOAL = Goal("Find me non slip, breathable running shoes with color: black and size: 9, and price lower than 60 dollars",
            "B0SHOE0001", "running shoes", SHOE.category, ("non slip", "breathable"), ("black", "9"), 60.0,
            "non slip breathable running shoes")


@pytest.mark.parametrize("chosen, product, expected", [
    (["black", "9"], SHOE, 1.0),                      # everything
    (["white", "9"], SHOE, 4 / 5),                    # one option wrong
    ([], SHOE, 3 / 5),                                # no option chosen
    (["black", "9"], MUG, 0.0),                       # another kind of product: r_type 0
])
def test_webshops_reward_formula(chosen, product, expected):
    assert reward(product, chosen, GOAL)["reward"] == pytest.approx(expected)


def test_reward_parts_price_and_fuzzy_attributes():
    pricey = Product(**{**SHOE.__dict__, "price": 79.99})
    parts = reward(pricey, ["black", "9"], GOAL)
    assert parts["price_ok"] is False and parts["reward"] == pytest.approx(4 / 5)
    goal = Goal(**{**GOAL.__dict__, "attributes": ("water resistant", "arch support", "slip non")})
    assert reward(SHOE, ["black", "9"], goal)["attributes_matched"] == 3  # description, features, word order
    assert token_set_ratio("non slip", "slip non") == 100 and token_set_ratio("red", "blue") < 85
    other_shoes = Product(**{**SHOE.__dict__, "title": "Velora Sneakers", "type": "sneakers",
                             "category": "Clothing › Shoes › Sneakers"})
    assert reward(other_shoes, ["black", "9"], GOAL)["r_type"] == 0.0  # no word of "running shoes" in its title


def shop(**kwargs):
    env = gym.make("Ragen/WebShop-v0", **kwargs)
    env.reset(seed=0, options={"goal": GOAL})
    return env


def test_pages_and_their_actions():
    env = shop(observation="page")
    obs, _, _, _, info = env.step("search[non slip breathable running shoes]")
    assert info["action_is_valid"] and "Page 1 (Total results: 50)" in obs and "[Next >]" in obs
    assert info["available_actions"][:2] == ["click[Back to Search]", "click[Next >]"]
    assert len([a for a in info["available_actions"] if a.startswith("click[B0")]) == 10
    obs, _, _, _, info = env.step("click[next >]")  # case-insensitive
    assert "Page 2" in obs and "click[< Prev]" in info["available_actions"]
    product = next(a for a in info["available_actions"] if a.startswith("click[B0"))
    obs, _, _, _, info = env.step(product)
    assert "[Buy Now]" in obs and "Price: $" in obs and "click[Description]" in info["available_actions"]
    obs = env.step("click[Features]")[0]
    assert obs.count("[SEP]") >= 3 and "[< Prev]" in obs
    assert "[Buy Now]" in env.step("click[< Prev]")[0]
    assert "Page 2" in env.step("click[< Prev]")[0]
    assert env.step("click[Back to Search]")[0].endswith("[Search]")


@pytest.mark.parametrize("action", ["click[Buy Now]", "search[]", "click[B0NOSUCH00]", "buy", "click[Next >",
                                    "search[x" * 300, "click[\x00]"])
def test_unavailable_actions_change_nothing(action):
    env = shop()
    before = env.step("search[running shoes]")[0]
    obs, reward_, terminated, _, info = env.step(action)
    assert (obs, reward_, terminated, info["action_is_valid"]) == (before, 0.0, False, False)


def test_under_the_penalize_rule_search_only_on_the_search_page_and_the_score_as_reward():
    env = gym.make("Ragen/WebShop-v0", invalid_action="penalize", reward="score")
    env.reset(seed=4)
    goal = env.unwrapped.goal
    env.step("search[running shoes]")
    assert env.step("search[mugs]")[4]["action_is_valid"] is False
    env.step("click[Back to Search]")
    env.step(f"search[{goal.query}]")
    while f"click[{goal.target}]" not in env.unwrapped.available_actions():
        assert env.step("click[Next >]")[4]["action_is_valid"]
    env.step(f"click[{goal.target}]")
    env.step(f"click[{goal.options[0]}]")  # the first wanted option only
    obs, r, terminated, _, info = env.step("click[Buy Now]")
    wanted = len(goal.attributes) + len(goal.options) + 1
    assert terminated and info["options_matched"] == 1 and r == pytest.approx((wanted - len(goal.options) + 1) / wanted)
    assert env.step("click[Back to Search]")[1:3] == (0.0, True)  # absorbing


def test_ragens_rules_by_default_binary_reward_advice_and_actions_no_op_actions():
    env = shop()
    obs = env.unwrapped._observation()
    assert obs.count("\n") == 10 and obs.endswith("You must choose from these actions: search[<your query>].")
    obs, r, _, _, info = env.step("search[running shoes]")
    assert "click[Back to Search], click[Next >]" in obs.splitlines()[-1] and info["action_is_valid"]
    # an action the page does not offer: stepped, nothing happens, no penalty from the agent loop
    for action in ("click[Buy Now]", "buy the shoes", "search[]"):
        after, r, term, _, info = env.step(action)
        assert (after, r, term, info["action_is_valid"], info["action_is_effective"]) == (obs, 0.0, False, False, False)
    # a search works from any page, flagged invalid off the search page (RAGEN's action_is_valid)
    obs, _, _, _, info = env.step("search[mugs]")
    assert "Page 1" in obs and not info["action_is_valid"] and info["action_is_effective"]
    # binary reward: the right product bought without its options (WebShop's score below 1) pays 0
    env = gym.make("Ragen/WebShop-v0")
    env.reset(seed=1)
    goal = env.unwrapped.goal
    assert goal.options
    while env.unwrapped.page != "item":
        env.step(env.unwrapped.oracle_action())
    _, r, term, _, info = env.step("click[Buy Now]")
    wanted = len(goal.attributes) + len(goal.options) + 1
    assert (r, term, info["raw_reward"], info["success"]) == (0.0, True, pytest.approx(1 - len(goal.options) / wanted),
                                                              False)
    env.reset(seed=1)
    while not env.unwrapped._terminated:
        _, r, term, _, info = env.step(env.unwrapped.oracle_action())
    assert (r, info["raw_reward"], info["success"]) == (1.0, 1.0, True)


def test_an_off_page_action_costs_the_format_penalty_only_under_the_penalize_rule():
    from ragen_envs.agent import ChatEnv

    for rule, penalty in (("ignore", 0.0), ("penalize", -0.1)):
        chat = ChatEnv("Ragen/WebShop-v0", invalid_action=rule)
        chat.reset(seed=0)
        assert chat.step("<think>x</think><answer>click[Buy Now]</answer>").reward == penalty


def test_the_oracle_buys_the_right_product_and_truncation_at_max_steps():
    env = gym.make("Ragen/WebShop-v0")
    for seed in range(30):
        env.reset(seed=seed)
        while True:
            obs, r, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            if terminated or truncated:
                break
        assert terminated and r == 1.0 and info["success"] and info["bought"] == env.unwrapped.goal.target
    short = gym.make("Ragen/WebShop-v0", max_steps=2)
    short.reset(seed=0)
    assert short.step("search[x]")[3] is False and short.step("click[Back to Search]")[3] is True


def test_the_generated_catalogue_and_goals():
    products = catalog.builtin_products()
    assert len(products) >= 1000 and len({p.id for p in products}) == len(products)
    assert len({p.category.split(" › ")[0] for p in products}) >= 5 and len({p.type for p in products}) >= 25
    assert all(p.options and p.attributes and p.price > 0 for p in products)
    import random

    goals = [catalog.builtin_goal(random.Random(i)) for i in range(200)]
    assert goals[:20] == [catalog.builtin_goal(random.Random(i)) for i in range(20)]
    by_id = {p.id: p for p in products}
    for g in goals:
        assert g.instruction.startswith("Find me ") and f"price lower than {g.price_upper:.0f} dollars" in g.instruction
        assert by_id[g.target].price <= g.price_upper and set(g.attributes) <= set(by_id[g.target].attributes)
    env = gym.make("Ragen/WebShop-v0")
    first = env.reset(seed=3)[0]
    assert env.reset(seed=3)[0] == first and gym.make("Ragen/WebShop-v0", split="test").reset(seed=3)[0] != first


def test_the_real_webshop_data_from_a_folder(tmp_path):
    items = [{"asin": "B0REAL0001", "name": "Acme Trail Running Shoe", "query": "running shoes",
              "product_category": "Clothing › Shoes › Running", "pricing": "$45.00",
              "customization_options": {"color": [{"value": "black", "image": None}]},
              "Attributes": ["Non Slip"], "BulletPoints": ["grippy"], "full_description": "A shoe."},
             {"asin": "B0REAL0002", "name": "Acme Mug", "query": "mug", "product_category": "Home › Kitchen",
              "pricing": "$5.00", "customization_options": {}, "Attributes": [], "BulletPoints": [],
              "full_description": ""}]
    (tmp_path / "items_shuffle.json").write_text(json.dumps(items))
    (tmp_path / "items_human_ins.json").write_text(json.dumps({"B0REAL0001": [
        {"instruction": "i want non slip running shoes in black", "instruction_attributes": ["non slip"],
         "instruction_options": ["black"]}]}))
    env = gym.make("Ragen/WebShop-v0", dataset=str(tmp_path), selection="hash")
    obs = env.reset(seed=0)[0]
    assert "i want non slip running shoes in black, and price lower than 70 dollars" in obs
    while True:
        obs, r, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        if terminated or truncated:
            break
    assert r == 1.0
    with pytest.raises(ValueError, match="items_shuffle.json"):
        gym.make("Ragen/WebShop-v0", dataset=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="RAGEN's goal ranges need over 2000 goals"):
        gym.make("Ragen/WebShop-v0", dataset=str(tmp_path))


def test_ragens_goal_ranges_over_the_seed_42_shuffle(tmp_path):
    import random

    items = [{"asin": "B0REAL0001", "name": "Acme Trail Running Shoe", "query": "running shoes",
              "product_category": "Clothing › Shoes", "pricing": "$45.00", "customization_options": {},
              "Attributes": [], "BulletPoints": [], "full_description": ""}]
    n = 2100
    (tmp_path / "items_shuffle.json").write_text(json.dumps(items))
    (tmp_path / "items_human_ins.json").write_text(json.dumps({"B0REAL0001": [
        {"instruction": f"goal {i}", "instruction_attributes": [], "instruction_options": []} for i in range(n)]}))
    order = list(range(n))
    random.Random(42).shuffle(order)
    for split, seed, index in (("train", 10_000, 10_000 % (n - 1500) + 1500), ("test", 123, 123 % 1000 + 500),
                               ("train", 7, 7 + 1500)):
        env = gym.make("Ragen/WebShop-v0", dataset=str(tmp_path), split=split)
        env.reset(seed=seed)
        assert env.unwrapped.goal.instruction.startswith(f"goal {order[index]},")


@pytest.mark.parametrize("chosen, wanted, match", [
    ("8 fl oz", "8 fl oz", True), ("8.0 fl oz", "8 fl oz", True), ("1 fl oz", "8 fl oz", False),
    ("pack of 1", "pack of 12", False), ("pack of 12", "pack of 12", True), ("black", "Black", True),
    ("x-large", "xx-large", False), ("X-Large", "x large", True), ("8 fl. oz", "8 fl oz", True), ("9", "10", False),
])
def test_options_with_numbers_match_only_the_same_numbers(chosen, wanted, match):
    # WebShop's fuzzy ratio took "1 fl oz" for "8 fl oz": the wrong size succeeded on 65 % of such goals
    assert option_match(chosen, wanted) is match


def test_no_other_value_of_a_generated_option_group_matches():
    env = gym.make("Ragen/WebShop-v0")
    groups = {tuple(values) for p in env.unwrapped.products for values in p.options.values()}
    for values in groups:
        for a in values:
            assert [b for b in values if option_match(a, b)] == [a]


@pytest.mark.parametrize("kwargs, message", [
    ({"results_per_page": 10**6}, r"^results_per_page must be in \[1, 50\] \(.+\), got 1000000$"),
    ({"max_results": 10**9}, r"^max_results must be in \[1, 1000\]"),
    ({"max_steps": 0}, r"^max_steps must be in \[1, 10000\]"),
])
def test_numbers_past_their_bounds_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("Ragen/WebShop-v0", **kwargs)
