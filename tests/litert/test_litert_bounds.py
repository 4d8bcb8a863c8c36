"""The export bounds' gradient sums (`tflab.litert.bounds.sensitivity`) against a direct tape.

`sensitivity` traces one function per signature that runs the forward pass
once and every per-element backward pass in a ``tf.map_fn`` loop, reducing
each in the graph. Here the same sums are computed the plain way: one eager
``tape.gradient`` per output element with a one-hot seed, numpy float64 sums.
The tiny model has weights far from ±1 and outputs whose elements have
different gradients, so leaving out ``|w|``, misplacing a seed or mixing two
outputs up changes the numbers (asserted below, so the comparison can fail).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tflab.litert import bounds
from tflab.saved_model import load_saved_model


class _Tiny(tf.Module):
    """``h = tanh(x @ w1 * mask)``, ``y = h @ w2 + b``, ``z = sum(h², axis=1)``, ``n = argmax(y)`` (int64)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(11)
        self.w1 = tf.Variable(rng.standard_normal((3, 4)).astype(np.float32) * 2.5, name="w1")
        self.w2 = tf.Variable(rng.standard_normal((4, 2)).astype(np.float32) * 0.3, name="w2")
        self.b = tf.Variable(np.array([0.5, -1.5], np.float32), name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([None, 4], tf.float32, name="mask")])
    def serve(self, x, mask):
        h = tf.tanh(tf.matmul(x, self.w1) * mask)
        y = tf.matmul(h, self.w2) + self.b
        return {"y": y, "z": tf.reduce_sum(h * h, axis=1), "n": tf.argmax(y, axis=1)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = _Tiny()
    path = str(tmp_path_factory.mktemp("tiny") / "saved_model")
    tf.saved_model.save(model, path, signatures={"serving_default": model.serve})
    rng = np.random.default_rng(12)
    batches = [{"x": rng.standard_normal((2, 3)).astype(np.float32),
                "mask": rng.uniform(0.5, 2.0, (2, 4)).astype(np.float32)},
               {"x": rng.standard_normal((3, 3)).astype(np.float32),
                "mask": rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32)}]
    batches[1]["x"][1, 0] = np.nan  # a NaN row: its gradients are taken at 0
    return path, load_saved_model(path), batches


def _direct(loaded, batches, out_name):
    """Per element: one eager tape.gradient with a one-hot seed, numpy float64 sums."""
    fn = loaded.signatures["serving_default"]
    variables = sorted((v for v in fn.variables if v.dtype.is_floating), key=lambda v: v.name)
    rel, ab, gx, gm = [], [], [], []
    for batch in batches:
        feed = {k: tf.constant(np.nan_to_num(a, nan=0.0)) for k, a in batch.items()}
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(list(feed.values()))
            y = fn(**feed)[out_name]
        for i in range(int(np.prod(y.shape))):
            seed = np.zeros(y.shape.as_list(), np.float32)
            seed.flat[i] = 1.0
            g = tape.gradient(y, variables + [feed["x"], feed["mask"]], output_gradients=tf.constant(seed))
            gw = [np.abs(t.numpy().astype(np.float64)) for t in g[:len(variables)]]
            rel.append([float((a * np.abs(v.numpy().astype(np.float64))).sum()) for a, v in zip(gw, variables)])
            ab.append([float(a.sum()) for a in gw])
            gx.append(float(np.abs(g[-2].numpy().astype(np.float64)).sum()))
            gm.append(float(np.abs(g[-1].numpy().astype(np.float64)).sum()))
    return [v.name for v in variables], np.array(rel), np.array(ab), np.array(gx), np.array(gm)


def _joined(batches):
    """The batches as `sensitivity` differentiates them where the signature takes any batch size: one
    feed of all their rows (`tflab.litert.bound_passes.joined_feed`). Its gradients are the per-batch
    ones up to float32 rounding (another batch size, another kernel blocking: 6.8e-7 relative measured
    with oneDNN capped at AVX2), and equal, bit for bit, a direct tape on the same joined rows."""
    return [{k: np.concatenate([b[k] for b in batches]) for k in batches[0]}]


def _columns(loaded):
    """Variable names in `_Sensitivity`'s column order."""
    cols, seen = [], set()
    for sig in loaded.signatures.values():
        for v in sig.variables:
            if id(v) not in seen and v.dtype.is_floating:
                seen.add(id(v))
                cols.append(v.name)
    return cols


@pytest.mark.parametrize("out_name", ["y", "z"])
def test_sums_equal_a_direct_per_element_gradient(tiny, out_name):
    path, loaded, batches = tiny
    bounds._SENSITIVITY_CACHE.clear()
    sens = bounds.sensitivity(path, loaded, batches)
    names, rel, ab, gx, gm = _direct(loaded, _joined(batches), out_name)
    per_batch = _direct(loaded, batches, out_name)[1]  # the same rows batch by batch: float32 rounding apart
    np.testing.assert_allclose(rel, per_batch, rtol=1e-5, atol=0)
    order = [names.index(c) for c in _columns(loaded)]
    okey = f"serving_default/{out_name}"
    assert sens.rel[okey].shape == rel.shape == (5 * (2 if out_name == "y" else 1), 3)
    np.testing.assert_allclose(sens.rel[okey], rel[:, order], rtol=1e-12, atol=0)
    np.testing.assert_allclose(sens.abs[okey], ab[:, order], rtol=1e-12, atol=0)
    np.testing.assert_allclose(sens.inputs[okey]["x"], gx, rtol=1e-6, atol=0)
    np.testing.assert_allclose(sens.inputs[okey]["mask"], gm, rtol=1e-6, atol=0)
    # The comparison can fail: |w| matters, every element has its own gradients, and the
    # two outputs differ (a seed on the wrong element or output would show).
    assert np.abs(rel - ab).max() > 0.1 * np.abs(rel).max()  # |w| far from 1
    assert len({tuple(np.round(r, 9)) for r in rel}) == len(rel)
    other = _direct(loaded, batches, "z" if out_name == "y" else "y")[1]
    assert other.shape != rel.shape or not np.allclose(other, rel)
    # The NaN row of batch 2 (row 1) was fed as 0: its gradient w.r.t. w1 has zeros where x is 0.
    assert np.isfinite(sens.rel[okey]).all()


def test_integer_output_has_zeros_and_the_cap_counts_across_batches(tiny, monkeypatch):
    path, loaded, batches = tiny
    bounds._SENSITIVITY_CACHE.clear()
    monkeypatch.setattr(bounds, "MAX_GRADIENT_ELEMENTS", 5)
    sens = bounds.sensitivity(path, loaded, batches)
    assert sens.rel["serving_default/n"].shape == (5, 3) and not sens.rel["serving_default/n"].any()
    assert not sens.inputs["serving_default/n"]["x"].any()
    # y has 4 + 6 elements (2 + 3 example rows, differentiated as one feed of 5 rows: the signature takes
    # any batch size): 5 are computed, both batches get some, the rest NaN. Rows 0 and 2 (each batch's
    # first row) have their largest |y| computed.
    y = sens.rel["serving_default/y"]
    done = np.isfinite(y).all(axis=1)
    assert done.sum() == 5 and done[:4].sum() >= 1 and done[4:].sum() >= 1
    assert np.isnan(y[~done]).all() and np.isnan(sens.inputs["serving_default/y"]["mask"][~done]).all()
    fn = loaded.signatures["serving_default"]
    first = 0
    for batch in batches:
        out = fn(**{k: tf.constant(np.nan_to_num(a, nan=0.0)) for k, a in batch.items()})["y"].numpy()
        assert done[first + int(np.argmax(np.abs(out[0])))]
        first += out.size
    names, rel, _, _, _ = _direct(loaded, _joined(batches), "y")
    order = [names.index(c) for c in _columns(loaded)]
    np.testing.assert_allclose(y[done], rel[done][:, order], rtol=1e-12, atol=0)
    # z has 5 elements: all computed
    assert np.isfinite(sens.rel["serving_default/z"]).all()
    # cached per SavedModel and example set
    assert bounds.sensitivity(path, loaded, batches) is sens



class _Mixed(tf.Module):
    """``y = Σ sqrt(w) · x + h · x``: a float32 ``w`` with a 0 (its gradient is +inf there) and a float16 ``h``."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.array([4.0, 0.0, 9.0], np.float32), name="w")
        self.h = tf.Variable(np.array([0.5, -2.0], np.float16), name="h")

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.reduce_sum(tf.sqrt(self.w)) * x + tf.cast(self.h, tf.float32) * x}


def test_each_variable_is_reduced_alone_in_float64_with_its_own_dtype_and_non_finite_gradients(tmp_path):
    """Per variable, in its own dtype: Σ|∂y/∂w|·|w| and Σ|∂y/∂w| equal numpy's float64 sums of the direct
    gradients, with +inf counted as float64's largest value and NaN as 0 (``np.nan_to_num``). The
    float32 ``w`` has an infinite gradient at its 0 (so its Σ|g| is the largest float64, its
    Σ|g|·|w| finite); the float16 ``h`` sits beside it. A reduction that mixed the variables up,
    dropped ``|w|`` or let the inf through would differ (the values are far apart)."""
    model = _Mixed()
    path = str(tmp_path / "saved_model")
    tf.saved_model.save(model, path, signatures={"serving_default": model.serve})
    loaded = load_saved_model(path)
    batches = [{"x": np.array([[1.5, -3.0]], np.float32)}]
    sens = bounds.sensitivity(path, loaded, batches)
    fn = loaded.signatures["serving_default"]
    cols = _columns(loaded)
    variables = {v.name: v for v in fn.variables}
    x = tf.constant(batches[0]["x"])
    for i in range(2):
        with tf.GradientTape() as tape:
            y = fn(x=x)["y"]
        seed = np.zeros((1, 2), np.float32)
        seed[0, i] = 1.0
        grads = tape.gradient(y, [variables[c] for c in cols], output_gradients=tf.constant(seed))
        g = [np.nan_to_num(np.abs(t.numpy().astype(np.float64))) for t in grads]
        want_abs = [a.sum() for a in g]
        want_rel = [(a * np.abs(variables[c].numpy().astype(np.float64))).sum() for a, c in zip(g, cols)]
        np.testing.assert_allclose(sens.abs["serving_default/y"][i], want_abs, rtol=1e-15)
        np.testing.assert_allclose(sens.rel["serving_default/y"][i], want_rel, rtol=1e-15)
    w_col = cols.index(next(c for c in cols if c.startswith("w")))
    assert (sens.abs["serving_default/y"][:, w_col] == np.finfo(np.float64).max).all()
    assert np.isfinite(sens.rel["serving_default/y"]).all()


def test_without_grappler_changes_this_thread_only_and_restores_it():
    """`tflab._tf.grappler.without_grappler` turns the meta-optimizer off in this thread's call
    options only; another thread's options, and this thread's after the block (also after an
    exception), are TF's default."""
    import threading

    from tflab._tf.grappler import grappler_disabled as disabled, without_grappler

    seen = {}
    assert not disabled()
    with pytest.raises(RuntimeError):
        with without_grappler():
            assert disabled()
            t = threading.Thread(target=lambda: seen.setdefault("other", disabled()))
            t.start()
            t.join()
            assert tf.function(lambda v: v * 2.0)(tf.constant(3.0)).numpy() == 6.0
            raise RuntimeError("planted")
    assert seen == {"other": False} and not disabled()


class _TwoSignatures(tf.Module):
    """``encode`` reads ``w`` and ``b``; ``score`` reads ``w`` only (``b`` is another signature's weight)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w = tf.Variable(rng.standard_normal((5, 4)).astype(np.float32), name="w")
        self.b = tf.Variable(rng.standard_normal(4).astype(np.float32), name="b")

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")])
    def encode(self, x):
        return {"z": tf.nn.sigmoid(tf.matmul(x, self.w) + self.b)}

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")])
    def score(self, x):
        return {"s": tf.reduce_sum(tf.matmul(x, self.w) ** 2, axis=1)}


def test_a_variable_another_signature_reads_counts_zero_not_nan(tmp_path):
    """A signature that does not capture one of the module's variables has a 0 gradient for it: its
    computed elements are finite (their bound too), and equal the one-signature module's sums."""
    model = _TwoSignatures()
    path = str(tmp_path / "saved_model")
    tf.saved_model.save(model, path, signatures={"encode": model.encode, "score": model.score})
    loaded = load_saved_model(path)
    batches = [{"x": np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)}]
    sens = bounds.sensitivity(path, loaded, batches)
    cols = _columns(loaded)
    s_rel, z_rel = sens.rel["score/s"], sens.rel["encode/z"]
    assert np.isfinite(s_rel).all() and np.isfinite(z_rel).all()
    b_col = next(i for i, c in enumerate(cols) if c.startswith("b"))
    assert (s_rel[:, b_col] == 0).all() and (z_rel[:, b_col] > 0).all()
    ref = np.zeros(2)
    b = bounds.output_bounds("none", "score/s", ref + 1.0, sens, False, {}, None)
    assert np.isfinite(b).all() and (b > 0).all()


class _Softmax(tf.Module):
    """``p = softmax(4·x @ w)`` over 40 classes: each row's sensitivity peaks at its largest p."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.random.default_rng(21).standard_normal((6, 40)).astype(np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
    def serve(self, x):
        return {"p": tf.nn.softmax(4.0 * tf.matmul(x, self.w))}


def test_the_elements_computed_under_the_cap_hold_the_largest_bound(tmp_path, monkeypatch):
    """Past the cap, the elements without a backward pass get the largest computed bound, so the
    computed ones must include where it peaks: each row's largest output (a softmax's gradient is
    ∝ p). Spread elements alone (0, 20, 40, …) land on tiny probabilities here."""
    model = _Softmax()
    path = str(tmp_path / "saved_model")
    tf.saved_model.save(model, path, signatures={"serving_default": model.serve})
    loaded = load_saved_model(path)
    batches = [{"x": np.random.default_rng(22).standard_normal((3, 6)).astype(np.float32)}]
    monkeypatch.setattr(bounds, "MAX_GRADIENT_ELEMENTS", 6)
    monkeypatch.setattr(bounds, "MIN_GRADIENT_ELEMENTS", 6)
    bounds._SENSITIVITY_CACHE.clear()
    rel = bounds.sensitivity(path, loaded, batches).rel["serving_default/p"][:, 0]
    fn, x = loaded.signatures["serving_default"], tf.constant(batches[0]["x"])
    w = fn.variables[0]
    with tf.GradientTape(persistent=True) as tape:
        p = fn(x=x)["p"]
    every = np.array([(np.abs(tape.gradient(p, w, output_gradients=tf.one_hot(i, p.shape[1])[None] * tf.one_hot(
        r, p.shape[0])[:, None]).numpy().astype(np.float64)) * np.abs(w.numpy().astype(np.float64))).sum()
                      for r in range(p.shape[0]) for i in range(p.shape[1])])
    done = np.isfinite(rel)
    assert done.sum() == 6
    np.testing.assert_allclose(rel[done], every[done], rtol=1e-6)
    assert np.nanmax(rel) == pytest.approx(every.max(), rel=1e-6)
    spread = bounds.spread_elements(rel.size, 6)  # what evenly spread elements alone would give
    assert every[spread].max() < 0.5 * every.max()


class _BatchMean(tf.Module):
    """``y = (x - mean(x over the batch)) @ w``: each row's output depends on the other rows."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.random.default_rng(5).standard_normal((3, 2)).astype(np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([None, 4], tf.float32, name="mask")])
    def serve(self, x, mask):
        return {"y": tf.matmul(x - tf.reduce_mean(x, axis=0, keepdims=True), self.w) + 0.0 * mask[:, :2]}


@pytest.mark.parametrize("model", [_Tiny, _BatchMean])
def test_batches_are_joined_only_where_the_rows_are_independent(tiny, tmp_path, model):
    """The passes run on all batches' rows at once when the joined outputs are the batches' own; a
    model whose rows interact (a mean over the batch) is differentiated batch by batch, and its sums
    still equal the direct per-batch gradients (the joined feed's would differ: the mean of 5 rows)."""
    _, _, batches = tiny
    m = model()
    path = str(tmp_path / "saved_model")
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    loaded = load_saved_model(path)
    bounds._SENSITIVITY_CACHE.clear()
    lines = []
    sens = bounds.sensitivity(path, loaded, batches, progress=lines.append)
    joined = [line for line in lines if "rows at once" in line]
    apart = [line for line in lines if "differentiated on its own" in line]
    assert len(joined) == 1  # tried first in both cases
    assert (apart == []) == (model is _Tiny)
    # joined: the direct tape on the joined rows; batch by batch (the rows interact): on each batch
    names, rel, _, _, _ = _direct(loaded, _joined(batches) if model is _Tiny else batches, "y")
    order = [names.index(c) for c in _columns(loaded)]
    np.testing.assert_allclose(sens.rel["serving_default/y"], rel[:, order], rtol=1e-12, atol=0)
    if model is _BatchMean:  # the joined feed's gradients are another function's
        fn = loaded.signatures["serving_default"]
        x = tf.constant(np.concatenate([np.nan_to_num(b["x"]) for b in batches]))
        mask = tf.constant(np.concatenate([b["mask"] for b in batches]))
        with tf.GradientTape() as tape:
            y = fn(x=x, mask=mask)["y"]
        seed = np.zeros(y.shape.as_list(), np.float32)
        seed.flat[0] = 1.0
        g = tape.gradient(y, fn.variables[0], output_gradients=tf.constant(seed)).numpy().astype(np.float64)
        w = fn.variables[0].numpy().astype(np.float64)
        assert abs(float((np.abs(g) * np.abs(w)).sum()) - rel[0, 0]) > 1e-3 * rel[0, 0]


def test_same_rows_allows_rounding_and_nothing_more():
    from tflab.litert.bound_passes import ROWS_TOLERANCE, same_rows

    a = np.linspace(-2.0, 3.0, 12, dtype=np.float32).reshape(6, 2)
    parts = [[a[:2]], [a[2:]]]
    assert same_rows([a.copy()], parts)
    assert same_rows([a * (1 + 1e-7)], parts)  # float32 rounding of another blocking
    assert not same_rows([a + 10 * ROWS_TOLERANCE * 3.0], parts)
    b = a.copy()
    b[0, 0] = np.nan
    assert not same_rows([b], parts)
    assert not same_rows([a[:5]], parts)  # another row count: no batch axis
    assert not same_rows([np.float32(1.0)], [[np.float32(1.0)], [np.float32(1.0)]])
    n = np.arange(6)
    assert same_rows([n], [[n[:2]], [n[2:]]]) and not same_rows([n[::-1]], [[n[:2]], [n[2:]]])
