"""``--arg NAME=VALUE`` has one grammar, read without TensorFlow (`tflab._api.cliargs.parse_arg_items`):
the pre-flight (`check_arg_grammar`, before TF loads) and the child (`tflab._user.target.parse_args`,
which makes the `tf.TensorSpec`) both read it, so an item is refused by both in the same words.

The handed case is the grammar kept twice (each copy with its own dtype list and dim rules); the
siblings are every kind of bad item; the healthy twin, good items parsed to the same specs and values.
"""

from __future__ import annotations

import pytest

from tflab.errors import UsageError

BAD = [
    ["x"],                                  # no '='
    ["1x=float32[2]"],                      # not a name
    ["x=1", "x=2"],                         # twice
    ["x=flaot32[2]"],                       # unknown dtype, with the near ones
    ["x=True[2]"],                          # a Python keyword as a dtype
    ["x=float32[-1,8]"],                    # negative dim
    ["x=float32[²]"],                       # a digit that is not ASCII
    ["x=float32[2,]"],                      # an empty dim
    ["x=int8[99999999999999999999]"],       # over int64
    ["x=float32[" + "9" * 5000 + "]"],      # over int64, longer than int() reads
    ["x=float32[2"],                        # unclosed
    ["x="],                                 # empty value
    ["s=abc"],                              # an unquoted string
    ["x=float32[2]", "y=int32[None,1e3]"],  # the second item's error
]


def _error(fn, items):
    try:
        fn(items)
    except UsageError as e:
        return str(e)
    return None


@pytest.mark.parametrize("items", BAD, ids=lambda v: " ".join(v)[:40])
def test_the_preflight_and_the_child_refuse_an_item_in_the_same_words(items):
    from tflab._api.cliargs import check_arg_grammar
    from tflab._user.target import parse_args

    before, after = _error(check_arg_grammar, items), _error(parse_args, items)
    assert before is not None and before == after, (before, after)


def test_good_items_make_the_same_specs_and_values():
    """Healthy twin: the grammar's reading and the TensorSpecs the child makes of it."""
    import tensorflow as tf

    from tflab._api.cliargs import check_arg_grammar
    from tflab._user.target import parse_args

    items = ["x=float32[None,8]", "y=int64[]", "z=float16", "q=float8_e4m3fn[2]", "w=float32[?, 3]",
             "n=3", "t=True", "s='a=b'", "l=[1, 2]", "u=3,"]
    check_arg_grammar(items)
    got = parse_args(items)
    assert got["x"] == tf.TensorSpec([None, 8], tf.float32, name="x") and got["x"].name == "x"
    assert got["y"] == tf.TensorSpec([], tf.int64, name="y") and got["z"] == tf.TensorSpec([], tf.float16, name="z")
    assert got["q"].dtype == tf.dtypes.as_dtype("float8_e4m3fn") and got["w"].shape.as_list() == [None, 3]
    assert (got["n"], got["t"], got["s"], got["l"], got["u"]) == (3, True, "a=b", [1, 2], (3,))


def test_one_grammar_serves_both():
    """The child's reader holds no grammar of its own: a planted change to the shared one shows in both."""
    from unittest import mock

    from tflab._api import cliargs
    from tflab._user.target import parse_args

    with mock.patch.object(cliargs, "_DTYPES", cliargs._DTYPES - {"float32"}):
        for fn in (cliargs.check_arg_grammar, parse_args):
            with pytest.raises(UsageError, match="unknown dtype 'float32'"):
                fn(["x=float32[2]"])
