"""argparse types for numeric CLI options: a bad number is one argparse error line, exit 2.

Every numeric option of every verb uses one of these instead of a bare
``int``/``float``, so ``--seed -1`` is refused while parsing, not by numpy
halfway through the work (``ValueError: expected non-negative integer``).
``tests/commands/test_cli_bad_input.py`` walks `tflab.cli.VERBS` and fails on any
option typed with a bare ``int`` or ``float``.

Use::

    from tflab._api.cliargs import int_at_least, non_negative_float

    p.add_argument("--seed", type=int_at_least(0), default=0)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Callable


def int_at_least(low: int, high: int | None = None, why_low: str = "") -> Callable[[str], int]:
    """argparse type: an integer in ``[low, high]`` (argparse turns the error into one line, exit 2).

    Args:
        low: the smallest value allowed.
        high: the largest value allowed, or None for no limit.
        why_low: the reason for ``low``, said with a smaller value ("" for none).

    Example:

    >>> int_at_least(0)("-1")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: must be an integer >= 0, got -1
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text[:40]}") from None
        if value < low:
            reason = f" ({why_low})" if why_low else ""
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}{reason}, got {text[:40]}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be an integer <= {high}, got {text[:40]}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (refuses nan and inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text[:40]}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text[:40]}")
    return value


# numpy's Generator takes seeds in [0, 2**128); TF's stateless seeds are int64 pairs.
seed_type = int_at_least(0, 2**63 - 1)
seed_type.__name__ = "seed"


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (refuses 0, nan and inf), e.g. a timeout in seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text[:40]}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text[:40]}")
    return value


# Every string tf.dtypes.as_dtype takes on TF 2.21 (``_ANY_TO_TF`` in tensorflow/python/framework/dtypes.py,
# the ``_ref`` forms included): a ``NAME[dims]`` whose NAME is outside it is refused before TF loads,
# in `tflab._user.target.parse_value`'s words. tests/commands/test_cli_preflight.py checks the list against TF.
_BASE_DTYPES = (
    "bfloat16 bool complex128 complex64 double float float16 float32 float64 float4_e2m1fn float8_e4m3b11fnuz "
    "float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz half int16 int2 int32 int4 int64 int8 qint16 qint32 "
    "qint8 quint16 quint8 resource string uint16 uint2 uint32 uint4 uint64 uint8 variant").split()
_DTYPES = frozenset(_BASE_DTYPES + [f"{n}_ref" for n in _BASE_DTYPES])
# The names `tflab._user.target.parse_value` offers as "did you mean" (TF's public ``tf.dtypes`` DTypes).
_SUGGESTED = ("bfloat16 bool complex128 complex64 double float16 float32 float64 half int16 int32 int64 int8 "
              "qint16 qint32 qint8 quint16 quint8 resource string uint16 uint32 uint64 uint8 variant").split()
#: `tflab._user.target.MAX_RANDOM_BYTES` in GiB: random inputs larger than this are refused.
MAX_RANDOM_GIB = 4
#: dtypes `tflab._user.target.materialize` draws no random values for (not float, complex, int or bool in TF:
#: ``DType.is_integer`` is False for the quantized ones).
_NO_RANDOM = frozenset("string resource variant qint8 qint16 qint32 quint8 quint16".split())
#: bytes per element (``DType.size`` on TF 2.21) of the dtypes wider than one byte.
_DTYPE_BYTES = {**dict.fromkeys("bfloat16 float16 half int16 uint16 qint16 quint16".split(), 2),
                **dict.fromkeys("float32 float int32 uint32 qint32".split(), 4),
                **dict.fromkeys("float64 double int64 uint64 complex64".split(), 8), "complex128": 16}
#: numpy arrays (the random inputs compare, precision and diagnose draw) hold at most this many dims
#: (``numpy/_core/include/numpy/ndarraytypes.h``: NPY_MAXDIMS).
NUMPY_MAX_DIMS = 64
#: float32's smallest normal and largest finite value (IEEE 754 binary32): a loss scale outside them
#: is 0, a subnormal or inf once cast to float32, and the scaled gradients are meaningless.
FLOAT32_NORMAL_RANGE = (1.1754943508222875e-38, 3.4028234663852886e+38)


def loss_scale_problem(value: float) -> str | None:
    """Why ``value`` cannot be a loss scale (not a normal float32 > 0), or None when it can."""
    low, high = FLOAT32_NORMAL_RANGE
    if not (math.isfinite(value) and value > 0):
        return "must be a number > 0"
    if not low <= value <= high:
        return (f"must be a normal float32 number > 0 ({low:.3g} … {high:.3g}): {value:g} becomes "
                f"{'0 or a subnormal' if value < low else 'inf'} in float32")
    return None


_MAX_DIM = 2**63 - 1


def _short(text: str, n: int = 80) -> str:
    """The user's text cut to ``n`` characters with "…(N chars)" (`tflab._user.usercode.shorten`'s form)."""
    return text if len(text) <= n else f"{text[:n]}…({len(text)} chars)"


@dataclasses.dataclass(frozen=True)
class SpecText:
    """``NAME=dtype[dims]`` read without TensorFlow: what `tflab._user.target.parse_args` makes a
    `tf.TensorSpec` of (``TensorSpec(dims, dtype, name=NAME)``).

    Attributes:
        dtype: a name ``tf.dtypes.as_dtype`` takes (``float32``, ``int64_ref``).
        dims: the dims, None for an unknown one; () for a scalar (``float32[]`` or a bare ``float32``).
        dims_text: the dims as typed (``"None"``, ``"?"``, ``"8"``), for messages.
    """

    dtype: str
    dims: tuple[int | None, ...]
    dims_text: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class LiteralValue:
    """``NAME=<python literal>``: the value `ast.literal_eval` read."""

    value: Any


def parse_arg_value(name: str, text: str) -> SpecText | LiteralValue:
    """The value half of one ``--arg NAME=VALUE``, read without TensorFlow: the one grammar that the
    pre-flight (`check_arg_grammar`) and the child (`tflab._user.target.parse_value`) both read.

    Args:
        name: the parameter name (for messages).
        text: ``dtype[dims]`` (``float32[None,8]``, ``int64[]``), a bare dtype name (a scalar spec), or
            a Python literal (``3``, ``0.5``, ``True``, ``'abc'``, ``[1, 2]``).

    Returns:
        A `SpecText` or a `LiteralValue`.

    Raises:
        tflab.errors.UsageError: an unknown dtype (with the nearest TF dtypes), a negative,
            non-integer or over-int64 dim, or a text that is neither form.
    """
    import ast
    import difflib
    import re

    from tflab.errors import UsageError

    m = re.match(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*(?:\[(.*)\])?\s*$", text)
    if m and m.group(1) in _DTYPES and m.group(1) not in ("True", "False", "None"):
        dtype, dims_text = m.group(1), m.group(2)
        raw = tuple(d.strip() for d in dims_text.split(",")) if dims_text is not None and dims_text.strip() else ()
        dims: list[int | None] = []
        for d in raw:
            if d in ("None", "?"):
                dims.append(None)
            elif d.startswith("-") and re.fullmatch(r"[0-9]+", d[1:]):
                raise UsageError(f"bad dimension {d} in --arg {name}={_short(text)}: a dim is >= 0, or None for "
                                 f"an unknown dim, e.g. {name}={dtype}[None,8]")
            elif not re.fullmatch(r"[0-9]+", d):  # ASCII digits: str.isdigit() also says yes to '²' and '２'
                raise UsageError(f"bad dimension {_short(d, 20)!r} in --arg {name}={_short(text)}: use integers or "
                                 f"None, e.g. {name}={dtype}[None,8]")
            else:
                digits = d.lstrip("0")
                if len(digits) > 19 or (digits and int(digits) > _MAX_DIM):  # no int() of 5000 digits
                    raise UsageError(f"dimension {_short(d, 24)} in --arg {name}={_short(text)} is larger than "
                                     f"TF's int64 dims allow (2**63-1); use a smaller dim, or None for an unknown dim")
                dims.append(int(d))
        return SpecText(dtype, tuple(dims), raw)
    if m and m.group(2) is not None:  # NAME[dims] with NAME no dtype (float33[2], True[2])
        near = difflib.get_close_matches(m.group(1), _SUGGESTED, n=3)
        raise UsageError(f"--arg {name}={_short(text)}: not a TensorSpec: unknown dtype {_short(m.group(1), 40)!r}"
                         + (f"; did you mean {' or '.join(near)}?" if near else
                            "; use a TF dtype such as float32, int64, bool"))
    try:
        return LiteralValue(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise UsageError(
            f"--arg {name}={_short(text)}: not a TensorSpec (dtype[dims], e.g. float32[None,8]) "
            f"nor a Python literal (e.g. 3, 0.5, True, 'text'); quote strings") from None


def parse_arg_items(items: list[str] | None) -> dict[str, SpecText | LiteralValue]:
    """Repeated ``--arg NAME=VALUE`` strings, read without TensorFlow, in order: the one grammar of
    ``--arg`` (`check_arg_grammar` before TF loads, `tflab._user.target.parse_args` after).

    Raises:
        tflab.errors.UsageError: no ``=``, a name that is not an identifier, a name given twice, or
            `parse_arg_value`'s refusals; the first in the items' order.
    """
    from tflab.errors import UsageError

    out: dict[str, SpecText | LiteralValue] = {}
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"--arg {_short(item)!r}: expected NAME=VALUE, e.g. x=float32[None,8] or n=3")
        name, _, value = item.partition("=")
        name = name.strip()
        if not name.isidentifier():
            raise UsageError(f"--arg {_short(item)!r}: {_short(name, 40)!r} is not a parameter name")
        if name in out:
            raise UsageError(f"--arg {name} given twice")
        out[name] = parse_arg_value(name, value)
    return out


def check_arg_grammar(items: list[str] | None, *, static: bool = False, max_rank: int | None = None,
                      draws: bool = False, batch: bool = False) -> None:
    """The ``--arg NAME=VALUE`` grammar, checked without TensorFlow (the supervisor's pre-flight).

    The grammar is `parse_arg_items`, the same function the child's `tflab._user.target.parse_args`
    reads, so both refuse the same items in the same words; then the verb's own rules below.

    Args:
        items: the ``--arg`` values.
        static: every dim must be given (``tflab lower``: XLA compiles for static shapes).
        max_rank: the most dims a spec may have (the verbs that draw numpy inputs: `NUMPY_MAX_DIMS`).
        draws: random values are drawn for each spec (``compare``, ``precision``: `tflab._user.target.materialize`):
            every dim given, a dtype with random values, at most `MAX_RANDOM_GIB` GiB, in its words.
        batch: every value is a TensorSpec whose dim 0 (the global batch) is given (``distribute``).

    Raises:
        tflab.errors.UsageError: one line.
    """
    from tflab.errors import UsageError

    for name, parsed in parse_arg_items(items).items():
        value = next(i.partition("=")[2] for i in items if i.partition("=")[0].strip() == name)
        if isinstance(parsed, LiteralValue):
            if batch:
                _refuse_batch(name)
            continue
        dtype, dims = parsed.dtype, list(parsed.dims_text)
        if draws and _base(dtype) in _NO_RANDOM:  # `materialize`'s words
            raise UsageError(f"--arg {name}: cannot make random values of dtype {_base(dtype)}; pass a float, int "
                             f"or bool spec")
        if batch and (not dims or dims[0] in ("None", "?")):
            _refuse_batch(name)
        if None in parsed.dims:
            filled = ",".join("4" if x in ("None", "?") else x for x in dims)[:60]
            if draws:  # `materialize`'s words
                raise UsageError(f"--arg {name}: shape [{', '.join(dims)[:60]}] has unknown dims; give every "
                                 f"dim to run it, e.g. {dtype}[{filled}]")
            if static:
                unknown = next(d for d in dims if d in ("None", "?"))
                raise UsageError(f"--arg {name}={_short(value)}: dim {unknown} is unknown, and XLA lowers for static "
                                 f"shapes; give every dim, e.g. {name}={dtype}[{filled}]")
        if max_rank is not None and len(dims) > max_rank:
            raise UsageError(f"--arg {name}={_short(value)}: {len(dims)} dims; numpy arrays (the random inputs "
                             f"drawn for it) hold at most {max_rank}")
        known = math.prod(d for d in parsed.dims if d is not None)
        if known > INT64_MAX:  # TF counts a shape's elements in int64 (TensorShape), every verb
            raise UsageError(f"--arg {name}: shape [{', '.join(dims)[:80]}] has {known:.3g} elements, more than TF "
                             f"can count in a shape (2^63-1, int64); use a smaller shape")
        if draws:
            nbytes = math.prod(parsed.dims) * _DTYPE_BYTES.get(_base(dtype), 1)
            if nbytes > MAX_RANDOM_GIB << 30:  # `materialize`'s words
                raise UsageError(f"--arg {name}: shape [{', '.join(str(d) for d in parsed.dims)[:80]}] needs "
                                 f"{nbytes / 2**30:,.1f} GiB of random data (limit {MAX_RANDOM_GIB} GiB); use a "
                                 f"smaller shape")


# The most elements a TF shape holds: TensorShape counts them in int64.
INT64_MAX = 2**63 - 1


def _base(dtype: str) -> str:
    return dtype[:-4] if dtype.endswith("_ref") else dtype


def _refuse_batch(name: str) -> None:
    """``distribute``'s words (`tflab.distribute.user`) for a value that is not a batch TensorSpec."""
    from tflab.errors import UsageError

    raise UsageError(f"--arg {name}: give a TensorSpec whose dim 0 is the global batch, e.g. {name}=float32[8,4]; "
                     f"the dataset is split along dim 0")


class WatchedStdout:
    """Wraps ``sys.stdout`` while argparse prints ``--help``/``--version``, keeping the write's OSError.

    argparse's ``_print_message`` swallows an ``OSError`` from ``file.write`` (CPython's
    ``Lib/argparse.py``), so ``tflab --version > /dev/full`` lost its line and still exited 0.
    ``error`` holds the first OSError a write or flush raised (``ENOSPC``, ``EIO``, ``EPIPE``);
    the caller turns it into one line and a non-zero exit.

    Example:

    >>> import io
    >>> w = WatchedStdout(io.StringIO()); w.write("tflab 0.2.0\\n"); w.error is None
    12
    True
    """

    def __init__(self, raw):
        self._raw = raw
        self.error: OSError | None = None

    def _do(self, op):
        try:
            return op(self._raw)
        except OSError as e:
            if self.error is None:
                self.error = e
            raise

    def write(self, text: str) -> int:
        return self._do(lambda raw: raw.write(text))

    def flush(self) -> None:
        self._do(lambda raw: raw.flush())

    def __getattr__(self, name):  # encoding, isatty, fileno, …: the real stream's
        return getattr(self._raw, name)


def parse_watched(parse: Callable[[], tuple]) -> tuple:
    """``parse()`` (``(args, code)``; args None for ``--help``/``--version``) with stdout watched.

    When argparse's own print failed: a reader that left (``EPIPE``) gives code 141 quietly; any
    other error (``ENOSPC``: ``tflab --version > /dev/full``) one ``tflab: error:`` line on stderr
    and code 2. Either way stdout is pointed at ``/dev/null`` so the interpreter's final flush of
    what is left stays quiet.
    """
    import contextlib
    import os
    import sys

    real = sys.stdout
    sys.stdout = watched = WatchedStdout(real)
    try:
        args, code = parse()
        if args is None:
            with contextlib.suppress(OSError):
                sys.stdout.flush()  # `tflab --help | head -1`: EPIPE here, not in the final flush
    finally:
        sys.stdout = real
    error = watched.error
    if args is not None or error is None:
        return args, code
    if not isinstance(error, BrokenPipeError):
        print(f"tflab: error: could not write to stdout: {error.strerror or error}", file=sys.stderr)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), real.fileno())
    return None, 141 if isinstance(error, BrokenPipeError) else 2


# ----------------------------------------------------------------------------- options that need another

#: the Namespace attribute holding the dests given on the command line (`record_given`)
GIVEN = "_tflab_given"


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the option of ``dest`` was given on the command line (not left at its default)."""
    return dest in getattr(args, GIVEN, ())


_GIVEN_CLASSES: dict[type, type] = {}


def record_given(action: argparse.Action) -> argparse.Action:
    """Makes ``action`` note its dest in the namespace's `GIVEN` set when its option is given.

    argparse calls an action only for an option on the command line (defaults are set without it),
    so a default value (``--runs``'s 20) and the same value typed are told apart.
    """
    if not action.option_strings or action.dest in ("help", "version"):  # they print and exit
        return action
    cls = type(action)
    sub = _GIVEN_CLASSES.get(cls)
    if sub is None:
        def __call__(self, parser, namespace, values, option_string=None):
            namespace.__dict__.setdefault(GIVEN, set()).add(self.dest)
            return cls.__call__(self, parser, namespace, values, option_string)

        sub = _GIVEN_CLASSES[cls] = type(cls.__name__, (cls,), {"__call__": __call__})
    action.__class__ = sub
    return action


#: the parser attribute holding its `only_with` rules
_RULES = "_tflab_only_with"


def only_with(parser: argparse.ArgumentParser, dest: str, when: Callable[[argparse.Namespace], bool],
              message: str) -> None:
    """Declares that the option of ``dest`` means something only when ``when(args)`` holds.

    The parser (`tflab.cli`'s, shared by every verb) refuses that option given where ``when`` is
    False, in one line, exit 2, before TensorFlow loads: it would otherwise be ignored without a
    word (``tflab lower --runs 5`` on the XLA path).

    Args:
        parser: the verb's sub-parser (in its ``add_arguments``).
        dest: the option's dest (``"runs"`` for ``--runs``).
        when: the condition on the parsed arguments (every default filled in).
        message: what the user reads: what the option needs, and what to do.

    Example:

    >>> only_with(p, "runs", lambda a: a.path == "graph",
    ...           "--runs needs --path graph (it sets how often the graph path's profile runs)")
    """
    parser.__dict__.setdefault(_RULES, []).append((dest, when, message))


def only_with_problem(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The message of the first `only_with` rule of ``parser`` that ``args`` breaks, or None."""
    for dest, when, message in getattr(parser, _RULES, ()):
        if given(args, dest) and not when(args):
            return message
    return None


def only_with_rules(parser: argparse.ArgumentParser) -> list[tuple[str, Callable, str]]:
    """The `only_with` rules declared on ``parser`` (for tests and ``--help``)."""
    return list(getattr(parser, _RULES, ()))


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``tflab VERB: error: …``), exit 2.

    argparse's default prints the whole usage block before the error; the lab's
    contract for an expected mistake is one line that says what was wrong and
    where to look (``--help``).
    """

    def error(self, message: str):
        # one line even when what was typed holds a line break (argparse quotes it as given)
        message = str(message).replace("\r\n", "\\n").replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _add_action(self, action):
        return super()._add_action(record_given(action))  # which options were typed: `only_with`

    def parse_known_args(self, args=None, namespace=None):
        # An option given an empty value (``--out ""``, ``--dot ""``) is a mistake:
        # the verbs' ``if args.dot:`` would silently ignore it (no file written)
        # or fall back to the default folder. argparse accepts "" for any str option.
        ns, extras = super().parse_known_args(args, namespace)
        for a in self._actions:
            if not a.option_strings or a.nargs == 0 or a.type not in (None, str):
                continue
            value = getattr(ns, a.dest, None)
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) and not v.strip() for v in values):
                self.error(f"argument {a.option_strings[-1]}: empty value; give a value or leave "
                           f"the option out")
        # An option that means something only with another (`tflab._api.cliargs.only_with`), given
        # without it, would be ignored without a word: refused here, for every verb, before TF loads.
        problem = only_with_problem(self, ns)
        if problem:
            self.error(problem)
        return ns, extras
