"""The command line's answer to Ctrl-C: one line and the shell's status for SIGINT, not a traceback."""

from __future__ import annotations

import argparse

import pytest

from paralleljob import cli


def test_an_interrupted_command_says_so_in_one_line_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    parser = cli.build_parser()
    parse = parser.parse_args

    def parse_and_interrupt(argv: object = None) -> argparse.Namespace:
        args = parse(argv)  # type: ignore[arg-type]
        args.handler = interrupted
        return args

    monkeypatch.setattr(parser, "parse_args", parse_and_interrupt)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main(["bench", "jobs"]) == 130
    assert capsys.readouterr().err == "paralleljob bench: interrupted\n"
