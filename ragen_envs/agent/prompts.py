"""Every text the agent loop shows a model. Change prompts here and nowhere else.

Where it matters for training, the wording follows RAGEN's released code (``ctx_manager.py``): the
"Max response length" line and the "Reward:" message. Unlike RAGEN, the history stays verbatim
(RAGEN rewrites past replies into a cleaned <think>/<answer> form): a rewritten history would not be
the token sequence the model generated, and training replays exactly the tokens it saw.

The wording fits any task: a game with a finite action set (several actions per reply, separated by
``||``, and a count of actions left), or an open-text task such as a question with retries, a
search, a shop or a program (one answer per reply, and a count of replies left). Both wrap the
action the same way: ``<answer>...</answer>``, after ``<think>...</think>`` when thinking is on.
"""

from __future__ import annotations

from ragen_envs.base import quoted

SYSTEM = """You are a helpful assistant. You work on the task below in turns: each turn you see the \
current observation and reply.

{instructions}

{action_rule}
{format_rule}"""

ACTIONS_RULE = 'You may take up to {max_actions} action(s) per turn, separated by "||".'
ANSWER_RULE = "Each reply holds exactly one answer."

FORMAT_THINK = "Reply in this format and nothing else: <think> your reasoning </think> <answer> {what} </answer>"
FORMAT_NO_THINK = "Reply in this format and nothing else: <answer> {what} </answer>"

EXAMPLE = "For example: {example}"

TURN = """Turn {turn}:
{feedback}Observation:
{observation}
{budget} {format_reminder}{length}"""

# RAGEN's length line; said only when the reply budget is known (ChatEnvConfig.length_line).
LENGTH = "\nMax response length: {n} words (tokens)."

ACTIONS_LEFT = "You have {n} actions left."
REPLIES_LEFT = "You have {n} {replies} left."

REMINDER_THINK = (
    "Always output: <think> [your thoughts] </think> <answer> [{what}] </answer> with no extra text. "
    "Strictly follow this format."
)
REMINDER_NO_THINK = "Always output: <answer> [{what}] </answer> with no extra text. Strictly follow this format."

# the observation line of a turn whose observation is an image alone, and what replaces an image
# dropped from the history (ChatEnvConfig.max_images)
IMAGE_OBSERVATION = "(the image above)"
IMAGE_DROPPED = "(an earlier image, no longer shown)"

# single_turn context window (RolloutConfig.context_window_mode): the earlier turns a prompt still shows,
# as text in its one user message, before the current turn's message
EARLIER_TURNS = "Your last {n} turn(s), oldest first:\n"
EARLIER_TURN = "--- you were shown:\n{shown}\n--- you replied:\n{reply}\n"
CURRENT_TURN = "--- now:\n"

FEEDBACK_REWARD = "Reward:\n{reward:g}\n"  # RAGEN's reward message
FEEDBACK_INVALID = "Your last reply was invalid: {why}. Nothing happened (format penalty {penalty:+.2f}).\n"
FEEDBACK_SOME_INVALID = "Ignored invalid actions: {actions}.\n"
# The most characters of a reply the feedback quotes back: a quoted reply must never cost the context
# more than the reply did (a reply of tabs written as repr escapes grew 16-fold in tokens).
QUOTE_CHARS = 120


def quote_actions(actions: list[str]) -> str:
    """The rejected actions as the feedback quotes them: each in single quotes, joined by ", ", every
    whitespace run as one space and other unprintable characters as "?"; past ``QUOTE_CHARS`` characters
    the rest is cut, saying how many characters were left out (``ragen_envs.base.quoted``)."""
    return quoted(", ".join(f"'{quoted(action, len(action))}'" for action in actions), QUOTE_CHARS)


def _what(valid_actions: list[str] | None) -> str:
    return "your action(s)" if valid_actions else "your answer"


def system_prompt(instructions: str, valid_actions: list[str] | None, max_actions: int,
                  enable_think: bool) -> str:
    """``valid_actions`` None marks an open-text task: one answer per reply."""
    what = _what(valid_actions)
    rule = (FORMAT_THINK if enable_think else FORMAT_NO_THINK).format(what=what)
    if valid_actions:
        sample = " || ".join(valid_actions[:max_actions])
        example = (f"<think> ... </think> <answer> {sample} </answer>" if enable_think
                   else f"<answer> {sample} </answer>")
        rule += "\n" + EXAMPLE.format(example=example)
    action_rule = ACTIONS_RULE.format(max_actions=max_actions) if valid_actions else ANSWER_RULE
    return SYSTEM.format(instructions=instructions.strip(), action_rule=action_rule, format_rule=rule)


def turn_prompt(turn: int, observation: str, valid_actions: list[str] | None, turns_left: int, max_actions: int,
                enable_think: bool, feedback: str = "", max_response_tokens: int | None = None,
                steps_left: int | None = None) -> str:
    """The budget left is counted in actions where the action set is finite, else in replies: what the
    turns left allow, or the steps the env has left (``steps_left``) where those are fewer."""
    if valid_actions:
        n = turns_left * max_actions if steps_left is None else min(turns_left * max_actions, steps_left)
        budget = ACTIONS_LEFT.format(n=n)
    else:
        n = turns_left if steps_left is None else min(turns_left, steps_left)
        budget = REPLIES_LEFT.format(n=n, replies="reply" if n == 1 else "replies")
    reminder = (REMINDER_THINK if enable_think else REMINDER_NO_THINK).format(what=_what(valid_actions))
    length = LENGTH.format(n=max_response_tokens) if max_response_tokens else ""
    return TURN.format(turn=turn, feedback=feedback, observation=observation, budget=budget,
                       format_reminder=reminder, length=length)
