"""The built-in SearchQA data: a corpus of passages and the questions over it, generated from the
country facts shipped by the PyPI package ``countryinfo`` (MIT licence), so nothing is downloaded.

Passages: one per country (region, capital, population, area, people, currency, calling code,
internet domain, neighbours) and one per first-level province whose name is unambiguous. The
passage texts are written here from the facts.

Questions, each with its answer and supporting passage ids:
- single-hop: "What is the capital of Estonia?" (also its subregion, people, calling code) and
  "In which country is the province of Harjumaa?";
- bridge: "In which subregion is the country whose capital is Tallinn?" and "What is the capital of
  the country that has the province of Harjumaa?" (the second needs two passages);
- comparison: "Which has the larger population, Estonia or Latvia?" (and area).
Questions that a copy of themselves would answer for partial credit (token F1 >= 0.3 with the answer)
are left out. The list is deterministic; a question's split (train or test, 80/20) follows from a hash of its text.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from ragen_envs.data import hash_split
from ragen_envs.once import build_once
from ragen_envs.searchqa.scoring import normalise, reward


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    kind: str  # single | bridge | comparison
    supporting: tuple[str, ...]  # ids of the passages that hold the answer


def _list(value) -> list:
    """countryinfo keeps some lists as their Python text."""
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value.startswith("["):
        try:
            parsed = ast.literal_eval(value)
            return parsed if isinstance(parsed, list) else []
        except (ValueError, SyntaxError):
            return []
    return []


def _int(value) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _countries() -> list[dict]:
    import countryinfo

    rows = []
    for country in countryinfo.all_countries():
        info = country.info()
        name, capital = info.get("name"), info.get("capital")
        capitals = _list(capital) or [capital]
        if len(capitals) != 1 or not isinstance(capitals[0], str):
            continue  # several capitals (or none): the capital questions would be ambiguous
        capital = capitals[0]
        if not isinstance(name, str) or not name or not capital or not info.get("subregion"):
            continue
        iso = info.get("ISO")
        iso = ast.literal_eval(iso) if isinstance(iso, str) and iso.startswith("{") else iso or {}
        rows.append({"name": name, "capital": capital, "region": info.get("region") or "",
                     "subregion": info["subregion"], "population": _int(info.get("population")),
                     "area": _int(info.get("area")), "demonym": info.get("demonym") or "",
                     "currencies": _list(info.get("currencies")), "calling": _list(info.get("callingCodes")),
                     "tld": _list(info.get("tld")), "borders": _list(info.get("borders")),
                     "alpha3": iso.get("alpha3", ""), "provinces": _list(info.get("provinces"))})
    return sorted(rows, key=lambda r: r["name"])


def _passage_id(kind: str, name: str) -> str:
    return f"{kind}:{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}"


def _country_text(c: dict, names_by_code: dict[str, str]) -> str:
    parts = [f"{c['name']} is a country in {c['subregion']}" + (f", {c['region']}." if c["region"] else "."),
             f"Its capital is {c['capital']}."]
    if c["population"]:
        parts.append(f"It has a population of about {c['population']:,} people.")
    if c["area"]:
        parts.append(f"Its area is {c['area']:,} square kilometres.")
    if c["demonym"]:
        parts.append(f"Its people are called {c['demonym']}.")
    if c["currencies"]:
        parts.append(f"Currency code: {', '.join(c['currencies'])}.")
    if c["calling"] and c["calling"][0]:
        parts.append(f"Calling code: +{c['calling'][0]}.")
    if c["tld"]:
        parts.append(f"Internet domain: {c['tld'][0]}.")
    neighbours = [names_by_code[b] for b in c["borders"] if b in names_by_code]
    if neighbours:
        parts.append(f"It borders {', '.join(neighbours)}.")
    return " ".join(parts)


def _province(text: str) -> tuple[str, str | None]:
    """"Harjumaa (Tallinn)" -> ("Harjumaa", "Tallinn")."""
    match = re.fullmatch(r"\s*(.+?)\s*\((.+)\)\s*", text)
    return (match.group(1), match.group(2)) if match else (text.strip(), None)


@build_once
def build() -> tuple[tuple[Passage, ...], tuple[Question, ...]]:
    """(passages, questions) of the built-in data, built once per process."""
    countries = _countries()
    names_by_code = {c["alpha3"]: c["name"] for c in countries if c["alpha3"]}
    country_names = {c["name"].lower() for c in countries}
    passages = [Passage(_passage_id("country", c["name"]), c["name"], _country_text(c, names_by_code))
                for c in countries]
    # Provinces whose name belongs to one country only (and is no country's name).
    owners: dict[str, set[str]] = {}
    for c in countries:
        for raw in c["provinces"]:
            if isinstance(raw, str) and raw.strip():
                owners.setdefault(_province(raw)[0], set()).add(c["name"])
    province_of: dict[str, dict] = {}
    for c in countries:
        for raw in c["provinces"]:
            if not isinstance(raw, str) or not raw.strip():
                continue
            name, seat = _province(raw)
            if len(owners[name]) != 1 or name.lower() in country_names or name in province_of:
                continue
            province_of[name] = c
            text = f"{name} is a province (a first-level division) of {c['name']}, in {c['subregion']}."
            if seat and seat != name:
                text += f" Its seat is {seat}."
            passages.append(Passage(_passage_id("province", f"{c['name']} {name}"), name, text))
    capitals = {}
    for c in countries:
        capitals.setdefault(c["capital"], []).append(c)
    questions: list[Question] = []
    for c in countries:
        pid = _passage_id("country", c["name"])
        questions.append(Question(f"What is the capital of {c['name']}?", c["capital"], "single", (pid,)))
        questions.append(Question(f"In which subregion of the world is {c['name']}?", c["subregion"], "single",
                                  (pid,)))
        if c["demonym"] and c["demonym"] != c["name"]:
            questions.append(Question(f"What are the people of {c['name']} called?", c["demonym"], "single", (pid,)))
        if c["calling"] and c["calling"][0]:
            questions.append(Question(f"What is the international calling code of {c['name']}?",
                                      f"+{c['calling'][0]}", "single", (pid,)))
        if len(capitals[c["capital"]]) == 1 and c["capital"] != c["name"]:
            questions.append(Question(f"In which subregion is the country whose capital is {c['capital']}?",
                                      c["subregion"], "bridge", (pid,)))
    rng = random.Random(0)
    provinces = sorted(province_of)
    for name in rng.sample(provinces, min(len(provinces), 300)):
        c = province_of[name]
        ppid, cpid = _passage_id("province", f"{c['name']} {name}"), _passage_id("country", c["name"])
        questions.append(Question(f"In which country is the province of {name}?", c["name"], "single", (ppid,)))
        questions.append(Question(f"What is the capital of the country that has the province of {name}?",
                                  c["capital"], "bridge", (ppid, cpid)))
    for key, word in (("population", "the larger population"), ("area", "the larger area")):
        known = [c for c in countries if c[key]]
        for _ in range(200):
            a, b = rng.sample(known, 2)
            if a[key] == b[key]:
                continue
            winner = a if a[key] > b[key] else b
            questions.append(Question(f"Which has {word}, {a['name']} or {b['name']}?", winner["name"],
                                      "comparison", (_passage_id("country", a["name"]),
                                                     _passage_id("country", b["name"]))))
    unique = {q.question: q for q in questions}  # a repeated comparison pair is asked once
    # F1 partial credit (HotpotQA's, RAGEN's) would pay for echoing a question whose answer repeats its
    # words ("What is the capital of San Marino?" "City of San Marino"; a comparison of two long names):
    # such questions are left out; so are those that spell out their own answer ("...the province of
    # Gaborone?" -> Gaborone, "...people of Germany" -> German), except comparisons, which name both options
    kept = [q for q in unique.values() if reward(q.question, q.answer) == 0
            and (q.kind == "comparison" or normalise(q.answer) not in normalise(q.question))]
    return tuple(passages), tuple(kept)


def questions(split: str) -> list[Question]:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test' for the built-in source, got {split!r}")
    return [q for q in build()[1] if hash_split(q.question) == split]
