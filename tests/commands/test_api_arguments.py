"""Public API arguments get one clear `UsageError` naming the argument (never AttributeError, a raw
KeyError, TF's error from tflab's own frame, or a NaN deadline read as a crash)."""

from __future__ import annotations

import math

import pytest
import tensorflow as tf

import tflab
from tflab.errors import UsageError


def f(x):
    return tf.reduce_sum(x * 2.0)


@pytest.fixture(scope="module")
def low():
    """A Lowering record with every stage (empty): the accessors' argument checks need no real lowering."""
    from tflab.lowering.records import STAGES, Lowering, Stage

    return Lowering("f", stages=tuple(Stage(name) for name in STAGES), _index=[])


@pytest.mark.parametrize("key", [None, 3, ""], ids=["None", "int", "empty"])
def test_provenance_key_must_be_a_str(low, key):
    """provenance(None) raised AttributeError ('NoneType' object has no attribute 'strip')."""
    with pytest.raises(UsageError, match="Lowering.provenance: key must be a non-empty str"):
        low.provenance(key)


def test_provenance_and_stage_healthy_twin(low):
    assert low.provenance("f.py:3") == {} and low.stage("hlo").name == "hlo"  # a line that made no op: {}


@pytest.mark.parametrize("name", ["bogus", None], ids=["bogus", "None"])
def test_unknown_stage_is_a_usage_error_listing_the_stages(low, name):
    """stage('bogus') raised a raw KeyError; it stays a KeyError too, for callers that caught one."""
    with pytest.raises(UsageError, match=r"no stage .*; the stages are python, autograph, .*asm") as info:
        low.stage(name)
    assert isinstance(info.value, KeyError) and not str(info.value).startswith('"')


@pytest.mark.parametrize("args, kwargs, named", [((), {"x": tf.TensorSpec([2, 8]), "y": tf.TensorSpec([2])}, "'y'"),
                                                 ((tf.ones([2, 8]),), {"extra": 1}, "'extra'")],
                         ids=["y", "extra"])
def test_lower_names_an_unknown_keyword(args, kwargs, named):
    """the error pointed at tflab/lowering/build.py as "user code" and never named y."""
    with pytest.raises(UsageError, match=rf"tflab.lower: f got an unexpected keyword argument {named}; "
                                         rf"its parameters: \(x\)") as info:
        tflab.lower(f, *args, **kwargs)
    assert "build.py" not in str(info.value)


def test_lower_keywords_healthy_twin():
    from tflab._api.argcheck import check_binds

    check_binds(f, (), {"x": tf.TensorSpec([2, 8])}, "tflab.lower", "f")  # binds: no error


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1, 0, True, "60"], ids=["nan", "inf", "-1", "0", "bool", "str"])
def test_run_workers_timeout_must_be_a_finite_positive_number(timeout):
    """timeout=nan was accepted; both workers died at once ("exited with status 124")."""
    with pytest.raises(UsageError, match="run_workers: timeout must be a finite number > 0"):
        tflab.run_workers(n=2, timeout=timeout)


def test_timeout_check_healthy_twin():
    from tflab._api.argcheck import check_float

    assert check_float(60, "timeout", "run_workers", minimum=0) == 60.0
    assert check_float(0.5, "timeout", "run_workers", minimum=0) == 0.5


@pytest.mark.parametrize("call", ["compare_modes", "materialize"])
def test_more_than_64_dims_is_one_usage_error(call):
    """compare_modes(f, TensorSpec([1]*65)) raised numpy's raw ValueError ("maximum supported
    dimension for an ndarray is currently 64, found 65"). Sibling: the shared materialize itself."""
    from tflab._user.target import materialize

    spec = tf.TensorSpec([1] * 65)
    with pytest.raises(UsageError, match="65 dims; numpy arrays .* hold at most 64"):
        tflab.compare_modes(f, spec, repeats=1) if call == "compare_modes" else materialize(spec)
    assert materialize(tf.TensorSpec([1] * 64)).shape.rank == 64  # healthy twin


def test_export_model_out_ending_in_dotdot_is_refused_before_loading(tmp_path):
    """export_model("fx/sm", "exp/..") loaded the model, then said "already exists (another
    run wrote it since the check)". Refused first; nothing is loaded (the model path does not even exist)."""
    with pytest.raises(UsageError, match=r"names the folder .* \(it ends in \.\.\); give the folder itself"):
        tflab.export_model(str(tmp_path / "no_such_model"), tmp_path / "exp" / "..", quantize=["none"])
