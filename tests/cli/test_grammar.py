"""One grammar across every psattn command: descriptions and help everywhere, lowercase flags, -q/-v on
every command, --quick/--full, --run-dir and --json [PATH] meaning one thing, old spellings still
working with a note on stderr; every command defined in psattn.commands."""

import argparse
import json
import os
from pathlib import Path

import pytest

import psattn
from psattn.cli import build_parser, main


def commands(parser=None, path=()):
    """(path, parser) of every command and command group."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def test_every_command_has_a_description_and_every_option_help():
    seen = list(commands())
    assert len(seen) > 15
    for path, parser in seen:
        assert parser.description, path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (path, action.option_strings or action.dest)
            assert all(flag == flag.lower() for flag in action.option_strings), (path, action.option_strings)


def test_every_command_lives_in_commands():
    """One home: each command's handler is defined in a module of psattn.commands (cli.py only builds the
    parser from them), and no module elsewhere adds a command."""
    handlers = {path: parser.get_default("func") for path, parser in commands()}
    for path, func in handlers.items():
        if func is not None:  # a command group has no handler of its own
            assert func.__module__.startswith("psattn.commands."), (path, func.__module__)
    src = Path(psattn.__file__).parent
    elsewhere = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p.parent.name != "commands" and "add_command(" in p.read_text() and p.name != "arguments.py"]
    assert elsewhere == []


def test_every_command_takes_quiet_and_verbose():
    for path, parser in commands():
        flags = parser._option_string_actions
        assert {"-q", "--quiet", "-v", "--verbose"} <= set(flags), path


def test_defaults_are_shown_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "-h"])
    text = capsys.readouterr().out
    assert "(default: 200)" in text and "(default: 0.8)" in text and "--run-dir DIR" in text


def test_plan_size_is_quick_or_full_everywhere():
    parser = build_parser()
    for argv in (["reproduce"], ["sweep", "text"], ["theory", "report"], ["meanfield", "reproduce"]):
        assert parser.parse_args(argv).mode == "quick", argv
        assert parser.parse_args([*argv, "--full"]).mode == "full", argv
        with pytest.raises(SystemExit):
            parser.parse_args([*argv, "--quick", "--full"])


def test_old_spellings_work_and_say_what_replaces_them(capsys):
    parser = build_parser()
    assert parser.parse_args(["sweep", "text", "--mode", "full"]).mode == "full"
    assert "--mode is deprecated" in capsys.readouterr().err
    args = parser.parse_args(["export", "--run", "runs/x", "--onnx", "m.onnx"])
    err = capsys.readouterr().err
    assert args.run_dir == "runs/x" and args.out == "m.onnx" and "use --run-dir" in err and "use --out" in err
    assert parser.parse_args(["generate", "--run", "runs/x", "--prompt", "a"]).run_dir == "runs/x"
    assert parser.parse_args(["theory", "gamma-c", "--d-k", "4", "--T", "8"]).context == [8.0]
    assert "use --context" in capsys.readouterr().err


def test_an_old_spelling_beside_its_new_one_is_refused(capsys):
    """``--context 100 --T 200`` evaluated T = 200 alone, whichever came last, and ``--quick --mode full`` ran
    the full plan, without a word."""
    for argv, old, new in ((["theory", "gamma-c", "--d-k", "64", "--context", "100", "--T", "200"], "--T", "--context"),
                           (["sweep", "text", "--quick", "--mode", "full"], "--mode", "--quick")):
        with pytest.raises(SystemExit) as info:
            main(argv)
        err = capsys.readouterr().err
        assert info.value.code == 2 and err.count("\n") <= 2 and f"{old}: not allowed with argument {new}" in err, err


def test_a_missing_run_dir_is_a_clear_error(capsys):
    assert_exit = pytest.raises(SystemExit)
    with assert_exit as info:
        main(["generate", "--prompt", "a"])
    err = capsys.readouterr().err  # one line: the error names it, and the command's help shows it as required
    assert info.value.code == 2
    assert err == "psattn generate: error: the following arguments are required: --run-dir (see psattn generate -h)\n"
    with pytest.raises(SystemExit):
        main(["generate", "-h"])
    assert "psattn generate [-h] [-q] [-v] --run-dir DIR --prompt PROMPT" in capsys.readouterr().out


def test_json_prints_or_writes(tmp_path, capsys):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([[16, 1.0], [64, 0.25], [256, 0.0625]]))
    assert main(["theory", "fit-exponent", str(sweep), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exponent"] == pytest.approx(-1.0)
    assert main(["theory", "fit-exponent", str(sweep), "--json", str(tmp_path / "fit.json")]) == 0
    assert "gamma_critical ∝ d_k^-1.0000" in capsys.readouterr().out  # the text, and the file
    assert json.loads((tmp_path / "fit.json").read_text())["exponent"] == pytest.approx(-1.0)


def test_quiet_turns_bars_off_and_cannot_be_combined_with_verbose(monkeypatch, capsys):
    monkeypatch.setenv("TQDM_DISABLE", "")  # restored after the test
    assert main(["theory", "gamma-c", "--d-k", "4", "--context", "8", "-q"]) == 0
    assert os.environ["TQDM_DISABLE"] == "1" and "gamma_c=" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["-q", "demo", "-v"])
    assert info.value.code == 2 and "cannot be combined" in capsys.readouterr().err
