import random
import re

import pytest

from ragen_envs.agent import parse_response
from ragen_envs.agent.parsing import _match_think_answer

REFERENCE = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)


@pytest.mark.parametrize("text, reasoning, actions, ok", [
    ("<think>go up</think><answer>Up</answer>", "go up", ["Up"], True),
    ("<think> a </think>\n\n <answer> Up || Left </answer>", "a", ["Up", "Left"], True),
    ("<think>x</think><answer>Up || Left || Down</answer>", "x", ["Up", "Left"], True),  # extra dropped
    ("<think>x</think><answer>Up ||  || junk ||</answer>", "x", ["Up", "junk"], True),
    ("<think>x</think><answer>   </answer>", "x", [], False),  # empty answer
    ("<think>x</think><answer>||</answer>", "x", [], False),
    ("<answer>Up</answer>", None, [], False),  # missing think
    ("<think>x</think>", None, [], False),  # missing answer
    ("<think>x</think> text <answer>Up</answer>", None, [], False),  # junk between the blocks
    ("<think>x<answer>Up</answer>", None, [], False),  # unclosed think
    ("<think>x</think><answer>Up", None, [], False),  # unclosed answer
    ("<answer>Up</answer><think>x</think>", None, [], False),  # wrong order
    ("<think>a<think>b</think><answer>Up</answer>", "a<think>b", ["Up"], True),  # nested: first opener
    ("<think>a</think>b</think><answer>Up</answer>", "a</think>b", ["Up"], True),  # lazy, but must reach answer
    ("pre <think>p</think><answer>Down</answer> post <answer>Up</answer>", "p", ["Down"], True),
    ("", None, [], False),
])
def test_parse_cases(text, reasoning, actions, ok):
    parsed = parse_response(text, max_actions=2)
    assert (parsed.reasoning, parsed.actions, parsed.format_ok) == (reasoning, actions, ok)


def test_without_think():
    parsed = parse_response("blah <answer>Left||Right||Up</answer>", max_actions=3, enable_think=False)
    assert parsed.reasoning is None and parsed.actions == ["Left", "Right", "Up"] and parsed.format_ok
    assert not parse_response("<think>x</think>", enable_think=False).format_ok


def test_agrees_with_the_reference_regex_on_random_text():
    pieces = ["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "a", "||", "Up"]
    rng = random.Random(0)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        m = REFERENCE.search(text)
        assert _match_think_answer(text) == (None if m is None else m.groups()), text


class CountingStr(str):
    """A str that counts the characters its find/rfind calls scan."""

    scanned = 0

    def find(self, sub, start=0, *args):
        pos = str.find(self, sub, start, *args)
        CountingStr.scanned += (len(self) if pos < 0 else pos + len(sub)) - start
        return pos

    def rfind(self, sub, *args):
        pos = str.rfind(self, sub, *args)
        CountingStr.scanned += len(self) - max(pos, 0)
        return pos


@pytest.mark.parametrize("hostile", [
    "<think>" * 100_000,
    "</think>x" * 100_000 + "</answer>",
    "</think> <answer>" * 100_000,
    "<think>" + "</think> <answer>" * 100_000,
    "<think>" + " " * 500_000 + "</think>" + " " * 500_000,
    "<answer>" * 100_000,
])
def test_linear_time_on_hostile_output(hostile):
    # Count the characters scanned instead of timing: a quadratic scan would be ~n^2 / 2.
    for text in (hostile, "<think>" + hostile):
        CountingStr.scanned = 0
        parse_response(CountingStr(text))
        # > 0: the parser scans with find (a regex search would bypass the count, and be quadratic)
        assert 0 < CountingStr.scanned <= 4 * len(text)


def test_bad_arguments():
    with pytest.raises(TypeError):
        parse_response(None)
    with pytest.raises(ValueError):
        parse_response("x", max_actions=0)


def test_a_reopened_think_tag_is_not_reasoning():
    # After a prompt that prefilled <think>, a model may open it again.
    assert parse_response("<think><think> <think>go left</think><answer>Left</answer>").reasoning == "go left"
    many = parse_response("<think>" + "<think> " * 200_000 + "</think><answer>Up</answer>")  # an index walk
    assert many.reasoning == "" and many.actions == ["Up"]
