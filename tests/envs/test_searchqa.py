"""SearchQA: RAGEN's reading of actions and answers (by default) and the strict one, rewards (HotpotQA
scoring), the built-in corpus and questions, BM25 retrieval, RAGEN's and Search-R1's retrieval servers."""

import collections
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import gymnasium as gym
import pytest

import ragen_envs  # noqa: F401
from ragen_envs.searchqa import corpus
from ragen_envs.searchqa.retrieval import PassageIndex
from ragen_envs.searchqa.scoring import f1, normalise, reward

ESTONIA = {"question": "What is the capital of Estonia?", "answer": "Tallinn", "supporting": ["country:estonia"]}


def env_with(question=ESTONIA, **kwargs):
    env = gym.make("Ragen/SearchQA-v0", **kwargs)
    env.reset(seed=0, options={"question": question})
    return env


def test_scoring_follows_hotpotqa():
    assert normalise("The  Republic of Estonia!") == "republic of estonia"
    assert reward("the Tallinn", "Tallinn") == 1.0
    assert f1("Northern Europe region", "Northern Europe") == pytest.approx(0.8)
    assert reward("Northern Europe region", "Northern Europe") == pytest.approx(0.8)
    assert reward("Europe and many other words here", "Northern Europe") == 0.0  # F1 0.25 < 0.3
    assert reward("Riga", "Tallinn") == 0.0


def test_search_then_finish():
    env = env_with()
    obs, r, term, trunc, info = env.step("search[capital Estonia]")
    assert (r, term, info["action_is_valid"], info["gold_retrieved"], info["searches"]) == (0.0, False, True, True, 1)
    assert "[1] Estonia:" in obs and obs.count("\n[") == 5  # top_k = 5 passages (RAGEN's)
    obs, r, term, trunc, info = env.step("finish[tallinn]")
    assert (r, term, info["success"]) == (1.0, True, True)


def test_partial_credit_and_a_miss():
    env = env_with({"question": "Where is Estonia?", "answer": "Northern Europe"})
    assert env.step("finish[Northern Europe region]")[1] == pytest.approx(0.8)
    env = env_with()
    assert env.step("finish[Riga]")[1:3] == (0.0, True)


# (reply's answer, RAGEN's reward, success, episode over, action_is_valid) for "What is the capital of
# Estonia?" (gold "Tallinn"), worked from RAGEN's SearchEnv.step and SearchRewardFn
RAGEN_CASES = [
    ("finish[Tallinn]", 1.0, True, True, True),
    ("finish[tallinn city]", 2 / 3, True, True, True),                     # F1: precision 1/2, recall 1
    ("finish[the city of tallinn in estonia]", 1 / 3, True, True, True),   # F1 1/3 >= 0.3
    ("finish[a big old city called tallinn by the sea]", 0.0, False, True, True),  # F1 0.25
    ("finish[]", 0.0, False, True, True),
    ("search[]", 0.0, False, False, True),                                # an empty query is a search
    ("The answer is Tallinn.", 1.0, True, True, False),                   # read from free text
    ("**Tallinn**", 1.0, True, True, False),
    ("I think so, Tallinn", 1.0, True, True, False),
    ("\\boxed{Riga} or Tallinn", 0.0, False, True, False),
    ("Search[capital of Estonia]", 0.0, False, True, False),              # prefixes are lower case
    ("search[abc", 0.0, False, True, False),
]


@pytest.mark.parametrize("action, reward_, success, over, valid", RAGEN_CASES)
def test_the_default_reading_is_ragens(action, reward_, success, over, valid):
    _, r, term, trunc, info = env_with().step(action)
    assert (r, info["success"], term or trunc, info["action_is_valid"]) == \
        (pytest.approx(reward_), success, over, valid)


def test_success_is_an_exact_match_only_on_request_and_yes_no_answers_get_no_partial_credit():
    assert env_with(success="exact").step("finish[tallinn city]")[4]["success"] is False
    yes = {"question": "Is Tallinn in Estonia?", "answer": "yes"}
    assert env_with(yes).step("finish[yes it is]")[1] == 0.0 and env_with(yes).step("finish[Yes]")[1] == 1.0
    assert f1("yes it is", "yes") == 0.0 and f1("no", "no") == 1.0


@pytest.mark.parametrize("action", ["search[]", "search[  ]", "finish[]", "search[abc", "search abc", "lookup[x]",
                                    "search[" * 1000, "search[" + "x" * 1000 + "]", "search[a\x00b]", "finish[a[b]"])
def test_under_the_penalize_rule_malformed_actions_are_invalid(action):
    env = env_with(invalid_action="penalize")
    obs, r, term, trunc, info = env.step(action)
    assert (r, term, info["action_is_valid"], info["searches"]) == (0.0, False, False, 0)


def test_passages_are_cut_and_truncation_comes_at_max_steps():
    env = env_with(max_passage_chars=20, top_k=1, max_steps=2)
    everything = env_with(max_total_chars=100).step("search[Estonia]")[0]
    assert everything.endswith("...") and len(everything.split("'Estonia':\n", 1)[1]) == 103
    obs = env.step("search[Estonia]")[0]
    line = [x for x in obs.splitlines() if x.startswith("[1]")][0]
    assert line.endswith("...") and len(line.split(": ", 1)[1]) == 23
    assert env.step("search[Latvia]")[3] is True
    assert env_with().step("search[zzzz qqqq]")[0].endswith("No passage matches 'zzzz qqqq'.")


def test_builtin_questions_and_corpus():
    passages, questions = corpus.build()
    kinds = collections.Counter(q.kind for q in questions)
    assert len(questions) >= 500 and min(kinds.values()) >= 100 and set(kinds) == {"single", "bridge", "comparison"}
    ids = {p.id for p in passages}
    assert len(ids) == len(passages) and all(set(q.supporting) <= ids for q in questions)
    train, test = corpus.questions("train"), corpus.questions("test")
    assert len(test) > 200 and not {q.question for q in train} & {q.question for q in test}
    assert corpus.build() is corpus.build()
    # no question spells out its own answer (comparisons name both options by design)
    from ragen_envs.searchqa.scoring import normalise
    assert not [q.question for q in questions
                if q.kind != "comparison" and normalise(q.answer) in normalise(q.question)]


def test_bm25_recall_at_3_on_single_hop_questions():
    index = PassageIndex(corpus.build()[0])
    single = [q for q in corpus.build()[1] if q.kind == "single"]
    hits = sum(any(h.passage.id in q.supporting for h in index.search(q.question, 3)) for q in single)
    recall = hits / len(single)
    print(f"BM25 recall@3 on {len(single)} single-hop questions: {recall:.3f}")
    assert recall >= 0.95


def test_the_index_is_built_once_per_process():
    a, b = gym.make("Ragen/SearchQA-v0"), gym.make("Ragen/SearchQA-v0", split="test")
    assert a.unwrapped.retriever._index is b.unwrapped.retriever._index


def test_a_dataset_item_is_seed_mod_n_of_the_first_max_instances():
    records = [{"question": f"q{i}?", "answer": str(i)} for i in range(5)]
    env = gym.make("Ragen/SearchQA-v0", dataset=records, max_instances=3)
    assert [env.reset(seed=s)[0].splitlines()[0] for s in (0, 1, 2, 3, 10_001)] == \
        ["Question: q0?", "Question: q1?", "Question: q2?", "Question: q0?", "Question: q2?"]


def test_a_corpus_and_questions_of_ones_own():
    passages = [{"id": "p1", "title": "Mars", "text": "Mars has two moons, Phobos and Deimos."},
                {"id": "p2", "title": "Venus", "text": "Venus has no moon."}]
    env = gym.make("Ragen/SearchQA-v0", corpus=passages,
                   dataset=[{"question": "How many moons has Mars?", "answer": "two", "supporting": ["p1"]}])
    env.reset(seed=0)
    steps = []
    while not steps or not (steps[-1][2] or steps[-1][3]):
        steps.append(env.step(env.unwrapped.oracle_action()))
    assert steps[0][4]["gold_retrieved"] and steps[-1][1] == 1.0
    with pytest.raises(ValueError, match="lacks field.*text"):
        gym.make("Ragen/SearchQA-v0", corpus=[{"title": "x"}])


class Retriever(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        docs = [{"document": {"id": f"d{i}", "contents": f'"Doc {i}"\nabout {body["queries"][0]}'}, "score": 1.0 - i}
                for i in range(body["topk"])]
        payload = json.dumps({"result": [docs]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


class RagenRetriever(Retriever):
    """RAGEN's retrieval server's API: POST /retrieve {query, top_k} -> {results: [{id, content, score}]}."""

    def do_POST(self):
        assert self.path == "/retrieve"
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert set(body) == {"query", "top_k"}
        docs = [{"id": f"d{i}", "content": f"about {body['query']} " + "x" * 900, "score": 1.0 - i}
                for i in range(body["top_k"])]
        payload = json.dumps({"results": docs}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_ragens_retrieval_server():
    server = HTTPServer(("127.0.0.1", 0), RagenRetriever)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = env_with(retriever_url=f"http://127.0.0.1:{server.server_port}")
        obs = env.step("search[moons]")[0]
    finally:
        server.shutdown()
        server.server_close()
    passages = obs.split("'moons':\n", 1)[1]
    assert passages.startswith("[1] about moons x") and "[5] about moons" in passages
    assert len(passages) == 4003 and passages.endswith("...")  # 800 characters a passage, 4,000 in all
    with pytest.raises(ValueError, match="retriever_api"):
        gym.make("Ragen/SearchQA-v0", retriever_url="http://127.0.0.1:1", retriever_api="solr")


def test_a_search_r1_retrieval_server():
    server = HTTPServer(("127.0.0.1", 0), Retriever)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = env_with(retriever_url=f"http://127.0.0.1:{server.server_port}/retrieve", top_k=2,
                       retriever_api="search-r1")
        obs = env.step("search[moons]")[0]
        assert "[1] Doc 0: about moons" in obs and "[2] Doc 1" in obs
    finally:
        server.shutdown()
        server.server_close()
    obs, r, term, _, info = env.step("search[again]")  # the server is gone: said, not raised
    assert "Search failed" in obs and info["action_is_valid"] and not term


def test_the_hub_source_is_hotpotqa(monkeypatch):
    from ragen_envs import data
    from tests.contract.test_data import fake_datasets

    calls = fake_datasets(monkeypatch, rows=[{"question": "q?", "answer": "a"}])
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=3.0: True)
    data.load_hub.cache_clear()
    gym.make("Ragen/SearchQA-v0", dataset="hub", split="validation")
    assert calls == [(("hotpotqa/hotpot_qa", "distractor"), "validation")]
    data.load_hub.cache_clear()


@pytest.mark.parametrize("answer, paid", [
    ("Estonia", 1.0), ("Estonia Latvia", 0.0), ("Latvia, Estonia", 0.0), ("both Estonia and Latvia", 0.0),
    ("Latvia", 0.0)])
def test_naming_both_options_of_a_comparison_pays_nothing(answer, paid):
    question = "Which has the larger population, Estonia or Latvia?"
    assert reward(answer, "Estonia", question=question) == paid


def test_the_hedge_earns_nothing_on_the_builtin_comparisons():
    # finish[A B] on "..., A or B?" earned 0.59 reward and 0.99 success with no search
    from ragen_envs.searchqa.scoring import options

    env = gym.make("Ragen/SearchQA-v0")
    source = env.unwrapped.source
    asked = [source[i] for i in range(len(source)) if options(source[i].question)][:50]
    assert len(asked) == 50
    for q in asked:
        env.reset(options={"question": {"question": q.question, "answer": q.answer}})
        _, paid, _, _, info = env.step(f"finish[{' '.join(options(q.question))}]")
        assert paid == 0.0 and not info["success"]
        env.reset(options={"question": {"question": q.question, "answer": q.answer}})
        assert env.step(f"finish[{q.answer}]")[1] == 1.0


def test_an_answer_naming_several_candidates_counts_as_none_of_them():
    # one fixed answer naming the four most common subregions: F1 alone paid it on 0.66 of the subregion
    # questions; it may earn no more than the best single guess among them
    env = gym.make("Ragen/SearchQA-v0").unwrapped
    questions = [env.source[i] for i in range(len(env.source)) if "subregion" in env.source[i].question]
    counts = collections.Counter(q.answer for q in questions)
    # and a list of continents, which names no subregion whole but shares a word with most (F1 paid 0.26)
    for hedge in (", ".join(answer for answer, _ in counts.most_common(4)), "Asia Europe Africa America"):
        wins = 0
        for q in questions:
            env.reset(options={"question": {"question": q.question, "answer": q.answer}})
            wins += env.step(f"finish[{hedge}]")[4]["success"]
        assert wins / len(questions) <= counts.most_common(1)[0][1] / len(questions), hedge
    # a wrong subregion that shares a word with the right one is a wrong answer, not half a right one
    assert reward("Eastern Asia", "Western Asia", candidates=("Eastern Asia", "Western Asia")) == 0.0
    # a right answer, and a part of it, still pay
    env.reset(options={"question": {"question": questions[0].question, "answer": questions[0].answer}})
    assert env.step(f"finish[{questions[0].answer}]")[1] == 1.0


@pytest.mark.parametrize("kwargs, message", [
    ({"top_k": 10**9}, r"^top_k must be in \[1, 50\] \(.+\), got 1000000000$"),
    ({"max_passage_chars": 10**9}, r"^max_passage_chars must be in \[1, 16384\]"),
    ({"max_total_chars": 0}, r"^max_total_chars must be in \[1, 16384\]"),
    ({"max_instances": 10**9}, r"^max_instances must be in \[1, 1000000\]"),
])
def test_numbers_past_their_bounds_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("Ragen/SearchQA-v0", **kwargs)


def test_a_query_is_quoted_back_no_longer_than_it_was_written():
    # a search of 9,000 tabs was echoed raw and as repr escapes: 7x the reply's tokens in the next prompt
    env = gym.make("Ragen/SearchQA-v0")
    before = len(env.reset(seed=0)[0])
    for query in ("\t" * 9000 + "zq", "\u200b" * 3000 + "zq", "x" * 400):
        env.reset(seed=0)
        obs = env.step(f"search[{query}]")[0]
        assert len(obs) - before <= min(len(query), 2 * 200 + 100) + 150, query[:5]
