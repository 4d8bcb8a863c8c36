"""A retrace fix is checked on the user's values: every replay starts from the state the first call ran in.

The eager reference and each candidate replay the recorded calls. A tf.Variable the body reaches
through an object (``mod.v``, a Keras model's weights) was left as the user's last call left it, so
both replays started there: they agreed with each other on outputs the user never had, and a fix
that changes the values was called checked.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

import tflab  # noqa: E402


K = 1.0  # a global the user rebinds between calls (tflab replays each call's value)


def test_a_counter_reached_through_an_object_is_replayed_from_the_first_call():
    global K
    K = 1.0
    mod = tf.Module()
    mod.v = tf.Variable(0.0)

    @tf.function
    def f(x):
        mod.v.assign_add(1.0)
        return tf.where(mod.v <= 3.0, x * K, 0.0)

    p = tflab.RetraceProbe(f)
    got = []
    for n in (1, 2, 3):
        got.append(p(tf.ones([n])).numpy().tolist())
        K += 1.0
    assert got == [[1.0], [2.0, 2.0], [3.0, 3.0, 3.0]]
    assert float(mod.v.numpy()) == 3.0
    text = p.traces[1].to_text()
    # One trace for every call bakes K = 1 in: call 2 gives 1 where the user's call gave 2. Replayed
    # from the last call's state (v = 3) every output was 0 in both, and the fix read "bit for bit".
    assert p.traces[1].details[0].plan.fix is None, text
    assert "none of the 2 candidate fix(es) worked" in text and "where eager gave 2" in text, text
    assert "bit for bit" not in text
    assert float(mod.v.numpy()) == 3.0  # the user's variable is as their last call left it


def _step(model, opt):
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


@pytest.mark.parametrize("built_before", [True, False], ids=["slots-before", "slots-in-first-call"])
def test_a_training_step_is_checked_on_the_users_losses_or_says_why_not(built_before):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1, momentum=0.9)
    if built_before:
        opt.build(model.trainable_variables)
    start = [w.numpy().copy() for w in model.trainable_variables]
    p = tflab.RetraceProbe(_step(model, opt))
    losses = [float(p(tf.ones([n, 3]))) for n in (2, 2, 3)]
    fix = p.traces[-1].details[0].plan.fix
    if built_before:
        # the eager reference replays the user's three steps from their first call's weights
        assert fix.checked and fix.measured["values_kept"], fix.line()
        ref = p._case_values().reference()  # the eager outputs the fix was compared with
        assert [float(r) for r in ref] == pytest.approx(losses, rel=1e-6)
        assert not all((w.numpy() == s).all() for w, s in zip(model.trainable_variables, start))
    else:
        # SGD's momentum slots are created by the first call: their values before it are unknown
        assert "values not kept" in fix.result and "momentum" in fix.result, fix.line()
        assert "create them before the first call" in fix.result
        assert not fix.measured.get("values_kept")


def test_a_jit_compiled_functions_fix_says_its_values_were_not_compared():
    """XLA rounds otherwise than the graph, and aborts in the forked child a candidate is checked in:
    a candidate run without the user's ``jit_compile=True`` compared outputs their fixed function
    would not give ("bit for bit" where XLA is 3-384 ULP from eager). The fix is checked on traces
    and says why its values were not; the same function without XLA is checked on its values."""
    def body(x, k):
        return x * k

    for jit in (True, False):
        p = tflab.RetraceProbe(tf.function(body, jit_compile=jit))
        x = tf.ones([2])
        p(x, 1.0), p(x, 2.0)
        fix = p.traces[1].details[0].plan.fix
        assert fix.checked, fix.line()
        if jit:
            assert not fix.measured["values_kept"] and "compiles with XLA (jit_compile=True)" in fix.result
        else:
            assert fix.measured["values_kept"] and "outputs equal eager's on your 2 calls" in fix.result


G = None  # a global tensor the user rebinds between calls


def test_a_stale_tensor_read_shows_the_values_not_the_objects_addresses():
    """``global 'G' was <tf.Tensor float32() at 0x7f…>, now <… at 0x7f…>`` named two objects; a small
    tensor is shown by its values (a big one still by identity: its values would not fit a line)."""
    global G
    G = tf.constant(2.0)

    @tf.function
    def f(x):
        return x * G

    p = tflab.RetraceProbe(f)
    p(tf.ones([2]))
    G = tf.constant(3.0)
    p(tf.ones([2]))
    text = p.to_text()
    assert "global 'G' was <tf.Tensor float32() 2.0> at trace #1, now <tf.Tensor float32() 3.0>" in text, text
    assert " at 0x" not in text
    from tflab.retrace.stale import value_repr

    assert value_repr(tf.zeros([100])).startswith("<tf.Tensor float32(100,) at 0x")


def test_an_eager_reference_that_does_not_finish_is_named_not_the_candidate(monkeypatch):
    """The candidate graph never sleeps; only the eager reference does. Its time limit was spent
    again in the candidate's child, which then read "the candidate did not finish in 3 s"."""
    import time

    monkeypatch.setenv("TFLAB_FIX_TIMEOUT_S", "3")

    def body(x, k):
        if tf.executing_eagerly():
            time.sleep(2.0)
        return x * k

    p = tflab.RetraceProbe(tf.function(body))
    x = tf.ones([2])
    p(x, 1.0), p(x, 2.0)
    fix = p.traces[1].details[0].plan.fix
    assert "run eagerly on the 2 recorded calls did not finish in 3 s" in fix.result, fix.line()
    assert "the candidate did not finish" not in fix.line()


def test_the_first_calls_state_is_what_the_function_can_reach_not_every_variable_alive():
    """The copy is taken at every probe's first call: a walk of the whole heap copied every model a
    long session ever built. Reached: a closure's Keras model (its tf.Variables, not Keras' wrappers),
    a global tf.Module's variable, a bound method's object; not a variable nothing in the code names."""
    import keras

    from tflab.retrace.world import reachable_variables

    unrelated = tf.Variable(1.0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    mod = tf.Module()
    mod.v = tf.Variable(2.0)
    globals()["_MOD"] = mod

    def f(x):
        return model(x) + _MOD.v  # noqa: F821 - set just above

    got = {id(v) for v in reachable_variables(f)}
    assert got == {id(w.value) for w in model.variables} | {id(mod.v)}
    assert id(unrelated) not in got

    class Holder:
        def __init__(self):
            self.w = tf.Variable(3.0)

        def step(self, x):
            return x * self.w

    h = Holder()
    assert [id(v) for v in reachable_variables(h.step)] == [id(h.w)]
