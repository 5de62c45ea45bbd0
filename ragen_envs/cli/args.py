"""Command-line flags derived from config dataclasses, so a flag and its default cannot drift.

Each field of a config dataclass becomes ``--field-name`` (or ``metadata["flag"]``, else ``metadata["flat"]``),
with the field's default and, as help, ``metadata["help"]``: data on the field, as TRL declares it, so no
comment is read for it (a ``# -- title --`` line in the class body starts a help group). A field that is
itself a dataclass adds its own fields, flat; a nested field's ``metadata["flat"]`` is the name it also goes
by at the top level of a saved config (one written before its group was nested: ``TrainerConfig``'s
``filter_value`` is ``filtering.value``). ``Literal`` types give choices, ``bool`` gives ``--x/--no-x``,
``dict`` takes JSON, ``list[str]`` takes several values, ``X | None`` also takes ``none``. ``build`` turns the
parsed namespace back into the nested config; ``flatten`` turns a saved config (a nested dict) into parser
defaults, for ``--config FILE``.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import re
import types
import typing
from functools import lru_cache
from typing import Any, Literal

from ragen_envs.registry import type_mismatch


def _dest(f: dataclasses.Field) -> str:
    return f.metadata.get("flag", f.metadata.get("flat", f.name)).replace("-", "_")


def _names(f: dataclasses.Field) -> list[str]:
    """The names a saved config may give the field ``f``: its own, its flag's and its flat name."""
    return list(dict.fromkeys(n for n in (f.name, _dest(f), f.metadata.get("flat")) if n))


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"config field {f.name} needs a default")


def field_help(cls: type) -> dict[str, str]:
    """Field name -> its help, ``metadata["help"]``: declared on the field (a comment beside it is not read)."""
    return {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if "help" in f.metadata}


@lru_cache(maxsize=None)
def field_sections(cls: type) -> dict[str, str]:
    """Field name -> the title of the section it is in (``# -- title ----`` lines in the class body)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out, title = {}, None
    for line in source.splitlines():
        if line.strip().startswith("# --"):
            title = line.strip().strip("#").strip().strip("-").strip()
        elif title and (name := _field_name(line)):
            out[name] = title
    return out


def _field_name(line: str) -> str | None:
    """The field a line of a class body declares (``    name: type ...``), or None."""
    stripped = line.strip()
    name = stripped.split(":", 1)[0]
    return name if name.isidentifier() and ":" in stripped and line[:len(line) - len(line.lstrip())] == "    " \
        else None


def _group(parser: argparse.ArgumentParser, title: str):
    for group in parser._action_groups:
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def _parts(tp) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error.msg} at character {error.pos}): {text!r}; JSON quotes "
                                         "its keys, e.g. '{\"slip\": 0.2}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is needed, e.g. '{{\"slip\": 0.2}}', got {text!r}")
    return value


def _converter(tp, optional: bool):
    origin = typing.get_origin(tp)
    if tp is dict or origin is dict:
        base = _json_object
    elif tp in (int, float, str):
        base = tp
    elif origin is Literal:
        base = str
    else:
        raise TypeError(f"no command-line form for {tp}")

    def convert(text: str):
        if optional and text.lower() == "none":
            return None
        return base(text)

    convert.__name__ = getattr(base, "__name__", "value")
    return convert


def add_config(parser: argparse.ArgumentParser, cls: type, title: str, include: set[str] | None = None,
               defaults: Any = None) -> None:
    """Add a flag per (nested) field of ``cls`` to the help group ``title`` (a ``# -- section --`` of
    the class starts its own group; a nested config gets a group named after its field); ``include``
    limits the top-level fields. A nested config's defaults are its parent's (``SFTConfig.chat`` may
    differ from ``ChatEnvConfig()``)."""
    hints = typing.get_type_hints(cls)
    helps, sections = field_help(cls), field_sections(cls)
    taken = {a.dest for a in parser._actions}
    for f in dataclasses.fields(cls):
        if include is not None and f.name not in include:
            continue
        tp = hints[f.name]
        default = getattr(defaults, f.name) if defaults is not None else _default(f)
        section = sections.get(f.name, title)
        if dataclasses.is_dataclass(tp):
            about = helps.get(f.name)
            nested = section if section != title else f"{f.name} ({about})" if about else f.name
            add_config(parser, tp, nested, defaults=default)
            continue
        dest = _dest(f)
        if dest in taken:
            raise ValueError(f"flag --{dest.replace('_', '-')} of {cls.__name__}.{f.name} is already taken")
        flag = "--" + dest.replace("_", "-")
        help_text = helps.get(f.name, "").replace("%", "%%")  # argparse formats help with %
        if "default" not in help_text:
            help_text = f"{help_text} (default: {default!r})".lstrip()
        inner, optional = _parts(tp)
        kwargs: dict[str, Any] = {"dest": dest, "default": default, "help": help_text}
        if inner is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(inner) is list:
            kwargs.update(nargs="*", type=str)
        else:
            choices = list(typing.get_args(inner)) if typing.get_origin(inner) is Literal else None
            # "none" may itself be a choice (scale_rewards): then None is reachable only as the default.
            optional = optional and not (choices and "none" in choices)
            kwargs["type"] = _converter(inner, optional)
            if choices:
                kwargs["choices"] = choices + ([None] if optional else [])
        _group(parser, section).add_argument(flag, **kwargs)
        taken.add(dest)


def build(cls: type, args: argparse.Namespace, include: set[str] | None = None):
    """The config ``cls`` from parsed flags (fields without a flag keep their defaults)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if include is not None and f.name not in include:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            values[f.name] = build(tp, args)
        elif hasattr(args, _dest(f)):
            values[f.name] = getattr(args, _dest(f))
    return cls(**values)


def flatten(cls: type, data: dict, where: str = "") -> dict[str, Any]:
    """Parser defaults (dest -> value) from a nested dict shaped like ``cls``; unknown keys fail."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    by_name.update({n: f for f in dataclasses.fields(cls) for n in _names(f)[1:] if n not in by_name})  # flag, flat
    out = {}
    for key, value in data.items():
        f = by_name.get(str(key).replace("-", "_"))
        if f is None:
            owner = _owner(cls, str(key).replace("-", "_"))
            if owner is not None:  # a nested field by its flag or flat name ("temperature", "filter_value")
                out.update(flatten(owner, {key: value}, where))
                continue
            known = set(by_name) | set(flag_dests(cls))
            raise ValueError(f"unknown config key {where}{key!r}{did_you_mean(str(key), known)}")
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ValueError(f"config key {where}{key!r} must be a mapping, got {value!r}")
            out.update(flatten(tp, value, f"{where}{key}."))
        else:
            wanted = type_mismatch(value, tp, classes=True)  # as a flag's value is converted to the field's type
            if wanted:
                raise ValueError(f"config key {where + str(key)!r} must be {wanted}, got {value!r}")
            out[_dest(f)] = value
    return out


def flag_dests(cls: type, flat: bool = False) -> dict[str, type]:
    """Every leaf field's flag name (its dest) in ``cls`` and its nested configs -> the config holding it;
    ``flat``: their flat names too (``metadata["flat"]``)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(flag_dests(hints[f.name], flat))
        else:
            out.update({n: cls for n in (_dest(f), f.metadata.get("flat") if flat else None) if n})
    return out


def _owner(cls: type, dest: str) -> type | None:
    owner = flag_dests(cls, flat=True).get(dest)
    return owner if owner is not cls else None


def did_you_mean(word: str, known) -> str:
    """"; did you mean 'x'?" for the closest of ``known``, or a list of them when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (known: {', '.join(sorted(known))})"


# flags users bring from other tools -> ours (a close spelling is found without them)
FLAG_SYNONYMS = {"--lr": "--learning-rate", "--steps": "--iterations", "--max-steps": "--iterations",
                 "--num-iterations": "--iterations", "--epochs": "--ppo-epochs"}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line after a one-line usage, with "did you mean" for a
    misspelt flag (or one named as another tool names it: ``FLAG_SYNONYMS``), and whose ``--help`` is one
    line a flag, grouped (``--help-all``: argparse's own). A flag is taken only when written whole: argparse's
    abbreviations would take ``--iteration 3`` as ``--iterations`` silently, and a later flag could change
    what an abbreviation means."""

    def __init__(self, *args, **kwargs):
        short = kwargs.pop("short_help", False)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **{**kwargs, "add_help": not short and kwargs.get("add_help", True)})
        if short:
            self.add_argument("-h", "--help", action=_Help, help="one line a flag, grouped")
            self.add_argument("--help-all", action=_Help, help="every flag with its whole help")

    def error(self, message: str):
        if message.startswith("unrecognized arguments:"):
            flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            hints = [f"did you mean {FLAG_SYNONYMS[flag]!r}?" if FLAG_SYNONYMS.get(flag) in flags
                     else did_you_mean(flag, flags).removeprefix("; ")
                     for flag in (word.split("=")[0] for word in message.split(":", 1)[1].split())
                     if flag.startswith("--")]
            message = "; ".join([message, *[h for h in hints if h.startswith("did you mean")]])
        self.exit(2, f"usage: {self.prog} [options] ({self.prog} --help lists them)\n{self.prog}: error: {message}\n")


class _Help(argparse.Action):
    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(parser.format_help() if option_string == "--help-all" else short_help(parser), end="")
        parser.exit(0)


def short_help(parser: argparse.ArgumentParser, width: int = 110) -> str:
    """``parser``'s flags one line each, in their groups: the flag, the start of its help, its default."""
    formatter = parser._get_formatter()
    lines = [f"usage: {parser.prog} [options]    (--help-all: each flag's whole help; --debug: tracebacks)"]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help is not argparse.SUPPRESS
                   and not {"-h", "--help-all", "--debug"} & set(a.option_strings)]
        if not actions:
            continue
        lines.append(f"{group.title}:")
        for action in actions:
            name = ", ".join(action.option_strings) or action.dest
            if isinstance(action, argparse.BooleanOptionalAction):
                name = "--[no-]" + action.option_strings[0][2:]
            text = re.sub(r"\s*\(default: [^()]*\)$", "", formatter._expand_help(action) if action.help else "")
            default = "" if action.default in (None, argparse.SUPPRESS) else f"  [{action.default!r}]"
            room = width - 4 - max(22, len(name)) - len(default)
            text = text if len(text) <= room else text[:room - 3].rstrip() + "..."
            lines.append(f"  {name:22s}  {text}{default}")
    return "\n".join(lines) + "\n"
