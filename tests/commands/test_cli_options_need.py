"""An option that means something only with another is refused without it, by the parser every verb
shares (`tflab._api.cliargs.only_with`), in one line, exit 2, before TF loads: it was ignored without a
word (``tflab lower --runs 5`` on the XLA path profiles nothing).

The handed case is ``lower --runs`` without ``--path graph``; the siblings are every other option of
that kind, across verbs (``--force`` without the output it forces, an int8-only option with no int8, a
text-only option with ``--json``, a loss scale with no float16 policy, a demo-only option with a
user step); each has a healthy twin, the same option with what it needs.
"""

from __future__ import annotations

import re

import pytest

from tests.commands.test_cli_preflight import tflab

ARG = ["--arg", "x=float32[4,8]"]

REFUSED = [
    (["lower", "m.py:f", *ARG, "--runs", "5"], "--runs needs --path graph"),  # handed
    (["lower", "m.py:f", *ARG, "--path", "xla", "--runs", "20"], "--runs needs --path graph"),  # the default typed
    (["lower", "m.py:f", *ARG, "--force"], "--force replaces an existing --out folder or --html file"),
    (["inspect", "m.py:f", *ARG, "--force"], "give --dot, or leave --force out"),
    (["inspect", "m.py:f", *ARG, "--json", "--max-ops", "3"], "--max-ops sets how many ops"),
    (["compare", "m.py:f", *ARG, "--force"], "give --hlo, or leave --force out"),
    (["retrace", "--force", "s.py"], "give --html, or leave --force out"),
    (["check-tflite", "m.tflite", "sm", "--force"], "give --node-data, or leave --force out"),
    (["check-tflite", "m.tflite", "sm", "--quantization", "float16", "--keep-float"], "--keep-float measures an int8"),
    (["export", "m.py:f", "--quantize", "none,float16", "--no-keep-float"], "makes no int8 variant"),
    (["autograph", "m.py:f", *ARG, "--json", "--no-diff"], "--no-diff shortens the text report"),
    (["precision", "m.py:f", *ARG, "--policies", "float32,mixed_bfloat16", "--loss-scale", "dynamic"],
     "--policies names none (mixed_float16 or float16)"),
    (["distribute", "--replicas", "3"], "need FILE.py:STEP"),
    (["distribute", "m.py:f", *ARG, "--no-export"], "belong to the built-in demo"),
    (["distribute", "m.py:f", *ARG, "--mode", "workers", "--replicas", "3"], "--mode workers runs no mirrored"),
    (["distribute", "--mode", "workers", "--no-export"], "--mode workers runs no export"),
]

ACCEPTED = [  # healthy twins: the same options with what they need (checked up to the parser's verdict)
    ["lower", "m.py:f", *ARG, "--path", "graph", "--runs", "5"],
    ["lower", "m.py:f", *ARG, "--out", "o", "--force"],
    ["lower", "m.py:f", *ARG, "--passes", "--cause"],
    ["inspect", "m.py:f", *ARG, "--dot", "g.dot", "--force"],
    ["inspect", "m.py:f", *ARG, "--max-ops", "3"],
    ["compare", "m.py:f", *ARG, "--hlo", "h.txt", "--force"],
    ["retrace", "--html", "p.html", "--force", "s.py"],
    ["check-tflite", "m.tflite", "sm", "--keep-float"],  # the recipe is read from the tensors
    ["check-tflite", "m.tflite", "sm", "--quantization", "int8", "--keep-float", "--node-data", "n.json", "--force"],
    ["export", "m.py:f", "--no-keep-float"],  # the default --quantize has int8
    ["autograph", "m.py:f", *ARG, "--no-diff"],
    ["precision", "m.py:f", *ARG, "--policies", "float32,float16", "--loss-scale", "8"],
    ["distribute", "m.py:f", *ARG, "--mode", "mirrored", "--replicas", "3"],
    ["distribute", "--mode", "mirrored", "--no-export"],
    ["distribute", "--crash-worker", "1"],
]

TYPO_FIRST = [  # a misspelt value is named by the verb's own check, not blamed on the option beside it
    (["precision", "m.py:f", *ARG, "--policies", "float32,mixed_flaot16", "--loss-scale", "8"],
     "unknown policy 'mixed_flaot16'"),
    (["export", "m.py:f", "--quantize", "none,int9", "--no-keep-float", "--out", "o/q"], "unknown variant(s) 'int9'"),
]


def _parse(argv):
    from tflab.cli import _named_verb, _parse as parse, build_parser

    parser, _ = build_parser(_named_verb(argv))
    return parse(parser, argv)


@pytest.mark.parametrize("argv, said", REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_an_option_without_what_it_needs_is_refused_by_the_parser(argv, said, capsys):
    args, code = _parse(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert args is None and code == 2 and len(err) == 1 and said in err[0], err
    assert err[0].startswith(f"tflab {argv[0]}: error: ")


@pytest.mark.parametrize("argv", ACCEPTED, ids=" ".join)
def test_the_same_option_with_what_it_needs_is_parsed(argv, capsys):
    args, code = _parse(argv)
    assert code is None and args is not None, capsys.readouterr().err


@pytest.mark.parametrize("argv, said", TYPO_FIRST, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_misspelt_partner_is_named_as_a_typo(argv, said, capsys):
    import argparse

    from tflab.commands import export_cmd, precision_cmd
    from tflab.errors import UsageError

    args, code = _parse(argv)
    assert code is None and isinstance(args, argparse.Namespace), capsys.readouterr().err

    with pytest.raises(UsageError, match=re.escape(said)):
        {"precision": precision_cmd, "export": export_cmd}[argv[0]].check_options(args)


def test_a_default_left_alone_is_not_given(capsys):
    """The rule judges what was typed: ``lower``'s ``--runs`` default (20) on the XLA path is fine, and
    the option's value is still its default."""
    args, code = _parse(["lower", "m.py:f", *ARG])
    assert code is None and args.runs == 20 and args.path == "xla"


def test_the_handed_case_is_one_line_before_tf(tmp_path):
    (tmp_path / "m.py").write_text("def f(x):\n    return x * 2.0\n")
    code, lines, tf_loaded = tflab(tmp_path, "lower", "m.py:f", *ARG, "--runs", "5")
    assert code == 2 and len(lines) == 1 and not tf_loaded, lines
    assert lines[0].startswith("tflab lower: error: --runs needs --path graph"), lines


def test_every_rule_can_be_judged_on_its_verbs_defaults():
    """A rule reads only options its verb has (a typo in a rule's dest would never fire)."""
    from tflab._api.cliargs import only_with_rules
    from tflab.cli import VERBS, build_parser

    parser, _ = build_parser()
    subs = parser._subparsers._group_actions[0].choices
    seen = 0
    for verb in VERBS:
        sub = subs[verb]
        defaults = {a.dest: a.default for a in sub._actions if a.dest != "help"}
        import argparse

        ns = argparse.Namespace(**defaults)
        for dest, when, message in only_with_rules(sub):
            assert dest in defaults, (verb, dest)
            when(ns)  # no AttributeError
            assert message and "\n" not in message
            seen += 1
    assert seen >= len(REFUSED) - 3
