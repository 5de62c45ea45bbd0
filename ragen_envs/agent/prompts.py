"""Every text the agent loop shows a model. Change prompts here and nowhere else."""

from __future__ import annotations

SYSTEM = """You are a helpful assistant playing a game in turns.

{instructions}

You may take up to {max_actions} action(s) per turn, separated by "||".
{format_rule}"""

FORMAT_THINK = (
    "Reply in this format and nothing else: <think> your reasoning </think> <answer> your action(s) </answer>"
)
FORMAT_NO_THINK = "Reply in this format and nothing else: <answer> your action(s) </answer>"

EXAMPLE = 'For example: {example}'

TURN = """Turn {turn}:
{feedback}State:
{observation}
You have {actions_left} actions left. {format_reminder}"""

REMINDER_THINK = (
    "Always output: <think> [your thoughts] </think> <answer> [your actions] </answer> with no extra text. "
    "Strictly follow this format."
)
REMINDER_NO_THINK = "Always output: <answer> [your actions] </answer> with no extra text. Strictly follow this format."

FEEDBACK_REWARD = "Reward from your last actions: {reward:+.2f}.\n"
FEEDBACK_INVALID = "Your last reply was invalid: {why}. Nothing happened (format penalty {penalty:+.2f}).\n"
FEEDBACK_SOME_INVALID = "Ignored invalid actions: {actions}.\n"


def system_prompt(instructions: str, valid_actions: list[str] | None, max_actions: int,
                  enable_think: bool) -> str:
    rule = FORMAT_THINK if enable_think else FORMAT_NO_THINK
    if valid_actions:
        sample = " || ".join(valid_actions[:max_actions])
        example = (f"<think> ... </think> <answer> {sample} </answer>" if enable_think
                   else f"<answer> {sample} </answer>")
        rule += "\n" + EXAMPLE.format(example=example)
    return SYSTEM.format(instructions=instructions.strip(), max_actions=max_actions, format_rule=rule)


def turn_prompt(turn: int, observation: str, actions_left: int, enable_think: bool, feedback: str = "") -> str:
    reminder = REMINDER_THINK if enable_think else REMINDER_NO_THINK
    return TURN.format(turn=turn, feedback=feedback, observation=observation, actions_left=actions_left,
                       format_reminder=reminder)
