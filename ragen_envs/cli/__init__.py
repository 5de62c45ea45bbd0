"""The command line, on top of everything else: ``ragen`` (``commands.py``: list, eval, sft, train,
plot, view, serve), its flags derived from the config dataclasses (``args.py``), the episode viewer
(``report.py``) and the oracle demo (``oracle_demo.py``)."""

from ragen_envs.cli.commands import build_parser, main, parse

__all__ = ["build_parser", "main", "parse"]
