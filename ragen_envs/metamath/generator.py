"""Grade-school word problems, generated offline: the built-in source of MetaMathQA.

Each template (written for this project) draws names, items and numbers from a ``random.Random``
and returns a ``Problem``: the question, a worked solution and the exact integer answer; numbers are chosen so
every step stays an integer. Problem i of a split is built from ``Random(base + i)`` (the template,
then its numbers): deterministic and random-access. Records use MetaMathQA's field names, so the
env reads generated and downloaded problems the same way.
"""

from __future__ import annotations

import random
from typing import Callable, NamedTuple

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Luca",
         "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wen", "Yusuf", "Zoe"]
FRUITS = ["apples", "oranges", "pears", "plums", "peaches", "lemons", "mangoes"]
THINGS = ["stickers", "marbles", "postcards", "stamps", "beads", "shells", "coins"]
BAKED = ["muffins", "cookies", "rolls", "scones", "cupcakes", "pretzels"]


class Problem(NamedTuple):
    question: str
    steps: list[str]  # the worked solution, one step a sentence
    answer: int


#: name -> template: a function of a ``random.Random`` that returns a ``Problem``.
TEMPLATES: dict[str, Callable[[random.Random], Problem]] = {}


def template(fn):
    """Register ``fn`` as a template, under its name."""
    TEMPLATES[fn.__name__] = fn
    return fn


def _names(r: random.Random, k: int) -> list[str]:
    return r.sample(NAMES, k)


@template
def shopping(r):
    n, item = r.choice(NAMES), r.choice(FRUITS)
    count, price, paid = r.randint(3, 12), r.randint(2, 9), 0
    paid = (count * price // 10 + 1 + r.randint(0, 3)) * 10
    cost = count * price
    return Problem(f"{n} buys {count} {item} at ${price} each and pays with ${paid}. How much change does {n} get?",
                   [f"The {item} cost {count} * {price} = ${cost}.",
                    f"The change is {paid} - {cost} = ${paid - cost}."],
                   paid - cost)


@template
def savings(r):
    n = r.choice(NAMES)
    weekly, weeks, spent = r.randint(5, 20), r.randint(4, 12), 0
    spent = r.randint(1, weekly * weeks // 2)
    saved = weekly * weeks
    return Problem(f"{n} saves ${weekly} every week for {weeks} weeks, then spends ${spent} on a gift. "
                   f"How many dollars are left?",
                   [f"{n} saves {weekly} * {weeks} = ${saved}.",
                    f"After the gift: {saved} - {spent} = ${saved - spent}."],
                   saved - spent)


@template
def sharing(r):
    n, thing = r.choice(NAMES), r.choice(THINGS)
    friends, each, kept = r.randint(2, 8), r.randint(3, 15), r.randint(1, 20)
    total = friends * each + kept
    return Problem(f"{n} has {total} {thing}. {n} keeps {kept} and shares the rest equally among {friends} friends. "
                   f"How many {thing} does each friend get?",
                   [f"{n} shares {total} - {kept} = {total - kept} {thing}.",
                    f"Each friend gets {total - kept} / {friends} = {each}."], each)


@template
def baking(r):
    n, item = r.choice(NAMES), r.choice(BAKED)
    trays, per_tray, eaten = r.randint(2, 6), r.randint(6, 24), 0
    eaten = r.randint(1, per_tray)
    made = trays * per_tray
    return Problem(f"{n} bakes {trays} trays of {item} with {per_tray} on each tray. The family eats {eaten} of them. "
                   f"How many {item} are left?",
                   [f"{n} bakes {trays} * {per_tray} = {made} {item}.", f"{made} - {eaten} = {made - eaten} are left."],
                   made - eaten)


@template
def speed(r):
    n = r.choice(NAMES)
    speed, hours = r.randint(3, 15) * 4, r.randint(2, 6)
    return Problem(f"{n} drives at {speed} kilometres per hour for {hours} hours. How many kilometres does {n} drive?",
                   [f"Distance is speed times time: {speed} * {hours} = {speed * hours} km."], speed * hours)


@template
def time_for_distance(r):
    n = r.choice(NAMES)
    speed, hours = r.randint(4, 20), r.randint(2, 9)
    distance = speed * hours
    return Problem(f"{n} cycles {distance} kilometres at a steady {speed} kilometres per hour. How many hours does the "
                   f"ride take?", [f"Time is distance over speed: {distance} / {speed} = {hours} hours."], hours)


@template
def ages(r):
    a, b = _names(r, 2)
    age_b, gap, years = r.randint(4, 30), r.randint(2, 25), r.randint(2, 15)
    age_a = age_b + gap
    return Problem(f"{a} is {gap} years older than {b}. {b} is {age_b} years old. How old will {a} be in "
                   f"{years} years?",
                   [f"{a} is {age_b} + {gap} = {age_a} now.",
                    f"In {years} years: {age_a} + {years} = {age_a + years}."],
                   age_a + years)


@template
def twice_as_many(r):
    a, b = _names(r, 2)
    thing = r.choice(THINGS)
    base, factor, extra = r.randint(4, 30), r.randint(2, 4), r.randint(1, 10)
    other = factor * base + extra
    return Problem(f"{a} has {base} {thing}. {b} has {extra} more than {factor} times as many as {a}. How many {thing} "
                   f"do they have together?",
                   [f"{b} has {factor} * {base} + {extra} = {other}.", f"Together: {base} + {other} = {base + other}."],
                   base + other)


@template
def percent_discount(r):
    n = r.choice(NAMES)
    price, percent = r.randint(2, 40) * 10, r.choice([10, 20, 25, 30, 40, 50])
    off = price * percent // 100
    return Problem(f"A jacket costs ${price}. {n} buys it in a sale at {percent}% off. How much does {n} pay?",
                   [f"The discount is {percent}% of {price} = ${off}.", f"{n} pays {price} - {off} = ${price - off}."],
                   price - off)


@template
def rectangle_area(r):
    length, width = r.randint(3, 30), r.randint(2, 20)
    return Problem(f"A rectangular garden is {length} metres long and {width} metres wide. What is its area in square "
                   f"metres?", [f"Area = length * width = {length} * {width} = {length * width}."], length * width)


@template
def perimeter_fence(r):
    length, width, cost = r.randint(5, 40), r.randint(3, 30), r.randint(2, 12)
    perimeter = 2 * (length + width)
    return Problem(f"A field is {length} m by {width} m. Fencing costs ${cost} per metre. How much does it cost "
                   f"to fence "
                   f"the whole field?",
                   [f"The perimeter is 2 * ({length} + {width}) = {perimeter} m.",
                    f"The fence costs {perimeter} * {cost} = ${perimeter * cost}."], perimeter * cost)


@template
def wages(r):
    n = r.choice(NAMES)
    rate, hours, overtime, bonus = r.randint(10, 30), r.randint(20, 40), r.randint(1, 10), 0
    bonus = rate + r.randint(2, 10)
    pay = rate * hours + bonus * overtime
    return Problem(f"{n} earns ${rate} an hour for the first {hours} hours of a week and ${bonus} an hour after that. "
                   f"This week {n} worked {hours + overtime} hours. How much did {n} earn?",
                   [f"Regular pay: {rate} * {hours} = ${rate * hours}.", f"Overtime: {bonus} * {overtime} = "
                    f"${bonus * overtime}.", f"Total: {rate * hours} + {bonus * overtime} = ${pay}."], pay)


@template
def pages(r):
    n = r.choice(NAMES)
    per_day, days, left = r.randint(10, 40), r.randint(3, 12), r.randint(5, 60)
    total = per_day * days + left
    return Problem(f"A book has {total} pages. {n} reads {per_day} pages a day for {days} days. How many pages are "
                   f"still unread?",
                   [f"{n} reads {per_day} * {days} = {per_day * days} pages.",
                    f"Unread: {total} - {per_day * days} = {left}."], left)


@template
def bus(r):
    start, off, on, off2 = r.randint(20, 50), 0, r.randint(3, 15), 0
    off = r.randint(2, start - 5)
    off2 = r.randint(1, start - off + on - 1)
    end = start - off + on - off2
    return Problem(f"A bus leaves with {start} passengers. At the first stop {off} get off and {on} get on. At the "
                   f"second stop {off2} get off. How many passengers are on the bus now?",
                   [f"After the first stop: {start} - {off} + {on} = {start - off + on}.",
                    f"After the second stop: {start - off + on} - {off2} = {end}."], end)


@template
def fraction_of(r):
    n, thing = r.choice(NAMES), r.choice(THINGS)
    denominator = r.choice([2, 3, 4, 5, 6])
    numerator = r.randint(1, denominator - 1)
    total = denominator * r.randint(3, 15)
    given = total * numerator // denominator
    return Problem(f"{n} had {total} {thing} and gave away {numerator}/{denominator} of them. How many {thing} "
                   f"does {n} "
                   f"have left?",
                   [f"{numerator}/{denominator} of {total} is {given}.",
                    f"{total} - {given} = {total - given} are left."],
                   total - given)


@template
def average(r):
    n = r.choice(NAMES)
    count = r.randint(3, 5)
    mean = r.randint(60, 95)
    scores = [mean + r.randint(-10, 10) for _ in range(count - 1)]
    last = mean * count - sum(scores)
    listed = ", ".join(map(str, scores))
    return Problem(f"{n}'s first {count - 1} test scores are {listed}. What score does {n} need on the next "
                   f"test for an "
                   f"average of exactly {mean}?",
                   [f"The {count} tests must add up to {mean} * {count} = {mean * count}.",
                    f"The first ones add up to {sum(scores)}.", f"{mean * count} - {sum(scores)} = {last}."], last)


@template
def boxes(r):
    item = r.choice(FRUITS)
    boxes, per_box, rotten = r.randint(3, 12), r.randint(10, 30), 0
    rotten = r.randint(1, per_box)
    price = r.randint(1, 5)
    good = boxes * per_box - rotten
    return Problem(f"A shop gets {boxes} boxes of {item} with {per_box} in each box. {rotten} of them are "
                   f"rotten and the "
                   f"rest sell for ${price} each. How much money does the shop take in?",
                   [f"There are {boxes} * {per_box} = {boxes * per_box} {item}.",
                    f"Good ones: {boxes * per_box} - {rotten} = {good}.",
                    f"Money: {good} * {price} = ${good * price}."],
                   good * price)


@template
def rate_work(r):
    a = r.choice(NAMES)
    per_hour, hours, target_extra = r.randint(4, 15), r.randint(2, 8), r.randint(1, 6)
    done = per_hour * hours
    more = per_hour * target_extra
    return Problem(f"{a} paints {per_hour} fence posts an hour and has painted for {hours} hours. The fence has "
                   f"{done + more} posts. How many more hours does {a} need?",
                   [f"Done so far: {per_hour} * {hours} = {done}.", f"Left: {done + more} - {done} = {more}.",
                    f"Hours: {more} / {per_hour} = {target_extra}."], target_extra)


@template
def recipe_scale(r):
    n = r.choice(NAMES)
    servings, flour, wanted = r.choice([2, 4, 6]), r.randint(1, 6) * 50, 0
    wanted = servings * r.randint(2, 5)
    needed = flour * wanted // servings
    return Problem(f"A recipe for {servings} people uses {flour} grams of flour. {n} cooks it for {wanted} people. "
                   f"How many grams of flour are needed?",
                   [f"That is {wanted} / {servings} = {wanted // servings} times the recipe.",
                    f"Flour: {flour} * {wanted // servings} = {needed} grams."], needed)


@template
def tickets(r):
    adults, children = r.randint(1, 6), r.randint(1, 8)
    adult_price, child_price = r.randint(8, 20), r.randint(3, 7)
    total = adults * adult_price + children * child_price
    return Problem(f"Museum tickets cost ${adult_price} for adults and ${child_price} for children. A group of "
                   f"{adults} "
                   f"adults and {children} children visits. What do they pay in all?",
                   [f"Adults: {adults} * {adult_price} = ${adults * adult_price}.",
                    f"Children: {children} * {child_price} = ${children * child_price}.",
                    f"Total: ${total}."], total)


@template
def consecutive(r):
    count = r.choice([3, 5])
    first = r.randint(5, 60)
    total = sum(range(first, first + count))
    return Problem(f"The sum of {count} consecutive whole numbers is {total}. What is the largest of them?",
                   [f"The middle number is {total} / {count} = {first + count // 2}.",
                    f"The largest is {first + count // 2} + {count // 2} = {first + count - 1}."], first + count - 1)


@template
def remaining_budget(r):
    n = r.choice(NAMES)
    budget = r.randint(10, 40) * 10
    rent_part = r.choice([2, 4, 5])
    food = r.randint(1, budget // 4)
    rent = budget // rent_part
    left = budget - rent - food
    return Problem(f"{n} has ${budget}. {n} spends 1/{rent_part} of it on a bike repair and ${food} on food. How much "
                   f"money is left?",
                   [f"The repair costs {budget} / {rent_part} = ${rent}.",
                    f"Left: {budget} - {rent} - {food} = ${left}."], left)


@template
def legs(r):
    chickens, cows = r.randint(2, 20), r.randint(1, 12)
    legs = 2 * chickens + 4 * cows
    return Problem(f"A farm has {chickens} chickens and {cows} cows. How many legs do the animals have in all?",
                   [f"Chickens: {chickens} * 2 = {2 * chickens}.", f"Cows: {cows} * 4 = {4 * cows}.",
                    f"Together: {legs}."], legs)


@template
def minutes(r):
    n = r.choice(NAMES)
    per_day, days = r.randint(15, 90), r.randint(3, 7)
    total = per_day * days
    hours, minutes = divmod(total, 60)
    return Problem(f"{n} practises the piano {per_day} minutes a day for {days} days. How many minutes is that in all?",
                   [f"{per_day} * {days} = {total} minutes ({hours} h {minutes} min)."], total)


@template
def profit(r):
    n = r.choice(NAMES)
    cost, price, sold = r.randint(2, 10), 0, r.randint(10, 80)
    price = cost + r.randint(1, 8)
    stand = r.randint(1, min(40, (price - cost) * sold))
    profit = (price - cost) * sold - stand
    return Problem(f"{n} makes lemonade at ${cost} a jug and sells each jug for ${price}. The stand costs ${stand} to "
                   f"rent. {n} sells {sold} jugs. What is {n}'s profit in dollars?",
                   [f"Profit per jug: {price} - {cost} = ${price - cost}.",
                    f"On {sold} jugs: {price - cost} * {sold} = ${(price - cost) * sold}.",
                    f"After rent: {(price - cost) * sold} - {stand} = ${profit}."], profit)


@template
def tank(r):
    rate_in, rate_out = r.randint(6, 20), 0
    rate_out = r.randint(1, rate_in - 1)
    minutes = r.randint(3, 20)
    volume = (rate_in - rate_out) * minutes
    return Problem(f"A tank fills at {rate_in} litres a minute while a leak drains {rate_out} litres a minute. "
                   f"It starts "
                   f"empty. How many minutes until it holds {volume} litres?",
                   [f"It gains {rate_in} - {rate_out} = {rate_in - rate_out} litres a minute.",
                    f"{volume} / {rate_in - rate_out} = {minutes} minutes."], minutes)


@template
def multistep_collection(r):
    a, b, c = _names(r, 3)
    thing = r.choice(THINGS)
    x = r.randint(5, 40)
    y = x + r.randint(3, 20)
    z = 2 * y - r.randint(1, y)
    return Problem(f"{a} has {x} {thing}. {b} has {y - x} more than {a}, and {c} has {2 * y - z} fewer than twice "
                   f"{b}'s. How many {thing} does {c} have?",
                   [f"{b} has {x} + {y - x} = {y}.",
                    f"Twice that is {2 * y}.", f"{c} has {2 * y} - {2 * y - z} = {z}."],
                   z)


def generate(rng: random.Random) -> dict:
    """One problem as a MetaMathQA-style record: query, response (ending "The answer is: N"), type."""
    name = rng.choice(list(TEMPLATES))
    problem = TEMPLATES[name](rng)
    response = " ".join(problem.steps) + f" The answer is: {problem.answer}"
    return {"query": problem.question, "response": response, "type": f"builtin_{name}",
            "original_question": problem.question}
