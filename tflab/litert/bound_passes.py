"""The end-to-end bound's backward passes: which output elements get one, and the traced function taking them.

`tflab.litert.bounds.sensitivity` runs one backward pass per chosen output element
(`chosen_elements`) through one traced function per signature (`gradient_sums_fn`), and,
where the signature takes any batch size, on all example batches at once (`joined_feed`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np


def chosen_elements(y, count):
    """The ``count`` flat indices of output ``y`` (a tf.Tensor) that get a backward pass, int32 ``[count]``.

    First the largest ``|y|`` of each row (the last axis; rows spread evenly when there are more than
    ``count // 2``), then the others spread evenly (``⌊i·n/k⌋`` of the ``n`` not chosen, as
    `spread_elements`): ``count`` distinct elements. A row's largest element is where its
    sensitivity peaks on a softmax or logistic output (``∂p_i/∂z ∝ p_i``): spread elements alone
    can miss it (ResNet50 at 32×32, random weights: the largest bound among 32 spread elements was
    1e-21, among 64 it was 1e-7), and the elements without a pass get the largest computed bound.
    """
    import tensorflow as tf

    size = tf.size(y, out_type=tf.int32)
    last = tf.shape(y, out_type=tf.int32)[-1] if y.shape.rank is not None and y.shape.rank >= 1 else size
    last = tf.maximum(tf.minimum(last, size), 1)
    rows = size // last
    n_top = tf.minimum(rows, count // 2)
    picked = tf.cast(tf.math.floordiv(tf.range(n_top, dtype=tf.int64) * tf.cast(rows, tf.int64),
                                      tf.maximum(tf.cast(n_top, tf.int64), 1)), tf.int32)
    mag = tf.abs(tf.cast(tf.reshape(y, [-1]), tf.float32))
    mag = tf.where(tf.math.is_nan(mag), tf.zeros_like(mag), mag)
    top = picked * last + tf.argmax(tf.gather(tf.reshape(mag[:rows * last], [rows, last]), picked), axis=-1,
                                    output_type=tf.int32)
    # The rest spread evenly over the elements not chosen yet: distinct, so ``count == size`` is all of them.
    others = tf.cast(tf.reshape(tf.where(tf.logical_not(tf.scatter_nd(
        top[:, None], tf.ones_like(top, tf.bool), [size]))), [-1]), tf.int32)
    rest = count - n_top
    at = tf.cast(tf.math.floordiv(tf.range(rest, dtype=tf.int64) * tf.cast(tf.size(others), tf.int64),
                                  tf.maximum(tf.cast(rest, tf.int64), 1)), tf.int32)
    return tf.concat([top, tf.gather(others, at)], 0)


def spread_elements(size: int, count: int) -> np.ndarray:
    """The ``count`` elements of a ``size``-element output that get a backward pass: ``⌊i·size/count⌋``.

    Spread evenly, so every example row of a batch gets its share when the output is larger than
    the cap (the first ``count`` elements would all be the first row's); all of them when
    ``count == size``.
    """
    return (np.arange(count, dtype=np.int64) * size // max(count, 1)).astype(np.int64)


def gradient_sums_fn(fn, variables: list, out_names: list[str], float_out: list[str], float_in: list[str],
                      feed: Mapping[str, Any], clean: bool = False):
    """Traces the per-element backward passes of one signature into one concrete function.

    The forward pass runs once under a ``tf.GradientTape``; a ``tf.map_fn``
    (two iterations at a time) then takes one `GradientTape.gradient` per
    seed, with a one-hot ``output_gradients`` on one element of one float
    output and zeros on the others (what a persistent tape feeds the
    signature's backward function for the outputs not differentiated), and
    reduces it in the graph. The element order is output by output in
    ``float_out`` order, `chosen_elements`' order within an output.

    Args:
        fn: the signature's function, ``loaded.signatures[key]``.
        variables: the float variables the signature captures, in column order.
        out_names: all output names of the signature, in the order of the
            returned sizes.
        float_out: the float outputs (the seeds' targets), a sublist of ``out_names``.
        float_in: the names of the float inputs in ``feed`` (watched: ``Σ|∂y/∂x|``).
        feed: one batch, ``{input name: tf.Tensor}``; only its names, dtypes
            and ranks are used: the function is traced for the signature's
            own input shapes (``None`` batch dimension where the signature
            has one), so batches of other sizes reuse it.
        clean: count NaN weight gradients as 0 and ±inf as float64's largest
            value before the sums (``np.nan_to_num``); without it the sums are
            of ``|g|`` as it is, and a row with a non-finite ``Σ|∂y/∂w|`` is
            the caller's to take again from the clean function (three more
            ops per element in every pass, for a case that is rare).

    Returns:
        A concrete function ``(feed, caps, abs_w)`` where ``caps`` is int32
        ``[len(float_out)]``, how many elements of each float output to
        differentiate, and ``abs_w`` float64 ``[Σ sizes + 1]`` the variables'
        ``|w|`` flattened in column order plus one trailing 0 (fed, so the
        traced graph reads no variable for it). It returns ``(sizes, elements, rel, abs,
        inputs, forward)``: int32 ``[len(out_names)]`` element counts; int32 ``[K]`` the flat index of
        each differentiated element in its output (`chosen_elements`); float64 ``[K, len(variables)]``
        ``Σ|∂y/∂w|·|w|`` and ``Σ|∂y/∂w|`` per variable, where ``K`` is the
        sum of ``min(size, cap)`` over the float outputs; float64
        ``[K, len(float_in)]`` ``Σ|∂y/∂x|`` per float input; the forward pass's outputs in
        ``out_names`` order (`same_rows` checks a joined feed with them). Each variable's
        ``|g|`` is cast to float64 and reduced on its own (no concatenated
        copy of all gradients per pass); input
        gradients are clamped to their own dtype's largest value, as
        ``np.nan_to_num`` does on them, then summed in float64.
    """
    import tensorflow as tf

    specs = fn.structured_input_signature[1]
    feed_spec = {n: tf.TensorSpec(specs[n].shape if n in specs else [None] * t.shape.rank, t.dtype, name=n)
                 for n, t in feed.items()}
    big64 = np.finfo(np.float64).max
    sizes_w = [int(np.prod(v.shape)) for v in variables]

    def finite_abs(g, big):
        g = tf.abs(g)
        return tf.where(tf.math.is_nan(g), tf.zeros_like(g), tf.minimum(g, tf.cast(big, g.dtype)))

    def sums(feed, caps, abs_w):
        watched = [feed[n] for n in float_in]
        with tf.GradientTape() as tape:
            tape.watch(variables)
            tape.watch(watched)
            outs = fn(**feed)
        ys = [outs[o] for o in float_out]
        forward = tuple(outs[o] for o in out_names)
        sizes = tf.stack([tf.size(outs[o], out_type=tf.int32) for o in out_names])
        counts = [tf.minimum(tf.size(y, out_type=tf.int32), caps[j]) for j, y in enumerate(ys)]
        which = tf.concat([tf.fill([c], j) for j, c in enumerate(counts)] + [tf.zeros([0], tf.int32)], 0)
        elem = tf.concat([chosen_elements(y, c) for c, y in zip(counts, ys)] + [tf.zeros([0], tf.int32)], 0)
        if not ys:
            return sizes, elem, tf.zeros([0, len(variables)], tf.float64), \
                tf.zeros([0, len(variables)], tf.float64), tf.zeros([0, len(float_in)], tf.float64), forward
        # |w| of variable j, flat: segment j of the fed vector (split once per call, outside the loop).
        w_parts = tf.split(abs_w, sizes_w + [1])[:len(variables)]

        def one(k):
            seeds = [tf.reshape(tf.one_hot(tf.where(tf.equal(which[k], j), elem[k], -1), tf.size(y), dtype=y.dtype),
                                tf.shape(y)) for j, y in enumerate(ys)]
            grads = tape.gradient(ys, variables + watched, output_gradients=seeds,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            if variables:
                # |g| per variable in float64 (|·| and the widening cast are exact in either order); each
                # variable is reduced on its own: no concatenated copy of all gradients per pass.
                g = [tf.reshape(tf.cast(tf.abs(tf.convert_to_tensor(d)), tf.float64), [-1])
                     for d in grads[:len(variables)]]

                if clean:  # NaN → 0, inf → float64's max, as np.nan_to_num
                    g = [finite_abs(gj, big64) for gj in g]
                r = tf.stack([tf.reduce_sum(gj * wj) for gj, wj in zip(g, w_parts)])
                a = tf.stack([tf.reduce_sum(gj) for gj in g])
            else:
                r = a = tf.zeros([0], tf.float64)
            x = tf.stack([tf.reduce_sum(tf.cast(finite_abs(g, np.finfo(g.dtype.as_numpy_dtype).max), tf.float64))
                          for g in grads[len(variables):]]) if watched else tf.zeros([0], tf.float64)
            return r, a, x

        # Two passes at a time: one pass's small ops leave a second core idle (ResNet50 at 32×32, 2 cores:
        # 0.144 → 0.115 s per pass); each iteration is independent, its sums land in its own row.
        r, a, x = tf.map_fn(one, tf.range(tf.size(which)), parallel_iterations=2,
                            fn_output_signature=(tf.TensorSpec([len(variables)], tf.float64),
                                                 tf.TensorSpec([len(variables)], tf.float64),
                                                 tf.TensorSpec([len(float_in)], tf.float64)))
        return sizes, elem, r, a, x, forward

    caps_spec = tf.TensorSpec([len(float_out)], tf.int32)
    abs_w_spec = tf.TensorSpec([sum(sizes_w) + 1], tf.float64)
    return tf.function(sums, autograph=False).get_concrete_function(feed_spec, caps_spec, abs_w_spec)


# A joined feed's forward outputs may differ from the batches' own in float32 rounding (another batch
# size, another kernel blocking); a model whose rows interact (a statistic over the batch) differs by
# far more. Relative to the output's largest magnitude.
ROWS_TOLERANCE = 1e-5


def joined_feed(fn, feeds: list[Mapping[str, Any]]) -> dict | None:
    """All example batches' rows as one feed, where the signature takes any batch size; else None.

    The backward passes then run at one input shape: each new shape costs the runtime a new
    instantiation of the traced passes (oneDNN primitives, XLA clusters such as Keras' grouped
    convolutions compiled again), measured at 1.4 s of the 17 s the passes took on ConvNeXtTiny at
    32×32 with batches of 1 and 4 rows. The rows of a serving signature are independent in
    nearly every model; `same_rows` checks it on the forward outputs before the passes are kept.

    Args:
        fn: the signature's function.
        feeds: one ``{input name: tf.Tensor}`` per batch (NaN already fed as 0).

    Returns:
        ``{input name: tf.Tensor}`` with the batches concatenated on axis 0, or None: one batch, or
        an input whose signature fixes its first dimension (or has no first dimension).
    """
    import tensorflow as tf

    if len(feeds) < 2:
        return None
    specs = fn.structured_input_signature[1]
    for name in feeds[0]:
        spec = specs.get(name) if isinstance(specs, Mapping) else None
        if spec is None or spec.shape.rank in (None, 0) or spec.shape[0] is not None:
            return None
    if any(set(f) != set(feeds[0]) for f in feeds):
        return None
    return {n: tf.concat([f[n] for f in feeds], 0) for n in feeds[0]}


def same_rows(joined: list[np.ndarray], parts: list[list[np.ndarray]]) -> bool:
    """Whether a joined feed's outputs are the batches' own outputs, concatenated on axis 0.

    Args:
        joined: the joined feed's outputs, in ``out_names`` order.
        parts: per batch, its outputs in the same order.

    Returns:
        True when every output has the batches' rows in order: non-float outputs equal, float
        outputs NaN and ±inf in the same places and the finite elements within `ROWS_TOLERANCE`
        of the output's largest finite magnitude.
    """
    for k, got in enumerate(joined):
        pieces = [np.asarray(p[k]) for p in parts]
        if got.ndim == 0 or any(q.ndim != got.ndim for q in pieces):
            return False
        want = np.concatenate(pieces, 0)
        if want.shape != got.shape:
            return False
        if got.dtype.kind not in "fc":
            if not np.array_equal(got, want):
                return False
            continue
        g, w = got.astype(np.float64), want.astype(np.float64)
        if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(g[np.isinf(g)], w[np.isinf(g)]) \
                or not np.array_equal(np.isinf(g), np.isinf(w)):
            return False
        fin = np.isfinite(w)
        scale = float(np.abs(w[fin]).max()) if fin.any() else 0.0
        if fin.any() and float(np.abs(g[fin] - w[fin]).max()) > ROWS_TOLERANCE * scale:
            return False
    return True
