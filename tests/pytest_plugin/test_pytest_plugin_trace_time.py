"""Trace time where tflab reports a trace: RetraceProbe, ``tflab retrace SCRIPT``
(and its --json), and the --html timeline; the same `TraceEvent.seconds` the pytest plugin reports.

A body that sleeps PAUSE seconds in Python sleeps only while TF traces it, so each trace takes at least
PAUSE and a cached call adds no trace time: an ISA-independent floor to assert against.
"""

from __future__ import annotations

import json
import re
import textwrap
import time

import pytest

tf = pytest.importorskip("tensorflow")

PAUSE = 0.25

SCRIPT = textwrap.dedent(f'''
    import time
    import tensorflow as tf

    @tf.function
    def train_step(x):
        time.sleep({PAUSE})
        return x * 2

    class Net(tf.Module):
        def __init__(self):
            self.v = None

        @tf.function
        def step(self, x):
            time.sleep({PAUSE})
            if self.v is None:
                self.v = tf.Variable(1.0)
            return x * self.v

    for n in (1, 1, 1, 2, 3):
        train_step(tf.ones([n]))
    net = Net()
    net.step(tf.ones([2]))
    time.sleep({PAUSE})  # not tracing
''')


def test_retrace_probe_gives_each_trace_s_seconds_and_the_share():
    from tflab.retrace.probe import RetraceProbe

    def body(x):
        time.sleep(PAUSE)
        return x + 1

    probe = RetraceProbe(body)
    for n in (1, 1, 2, 2):
        probe(tf.ones([n]))
    secs = probe.trace_seconds
    assert len(secs) == probe.trace_count == 2
    assert all(PAUSE <= s < PAUSE + 5 for s in secs), secs
    assert probe.seconds == pytest.approx(sum(secs))
    assert probe.seconds <= probe.call_seconds  # trace time is part of the calls' time
    text = probe.to_text()
    m = re.search(r"trace time: body: 2 traces, (\d+\.\d+) s of the (\d+\.\d+) s its calls through the probe "
                  r"took \((\d+)%\) \(#1 \d+\.\d+ s, #2 \d+\.\d+ s; tracing plus the first run's instantiation\)",
                  text)
    assert m, text
    d = probe.to_dict()
    assert d["trace_seconds"] == secs and d["call_seconds"] == probe.call_seconds


def test_retrace_probe_times_the_variable_creation_retrace_apart():
    from tflab.retrace.probe import RetraceProbe

    class Net(tf.Module):
        def __init__(self):
            self.v = None

        def __call__(self, x):
            time.sleep(PAUSE)
            if self.v is None:
                self.v = tf.Variable(1.0)
            return x * self.v

    probe = RetraceProbe(Net())
    probe(tf.ones([2]))
    assert [t.kind for t in probe.traces] == ["first", "variable_creation"]
    assert all(s >= PAUSE for s in probe.trace_seconds), probe.trace_seconds  # each trace sleeps once


@pytest.fixture(scope="module")
def script_result(tmp_path_factory):
    from tflab.retrace.log import trace_script

    path = tmp_path_factory.mktemp("trace_time") / "script.py"
    path.write_text(SCRIPT)
    return trace_script(str(path))


def test_tflab_retrace_gives_each_function_s_seconds_and_share_of_the_script(script_result):
    r = script_result
    fns = {f.function_name: f for f in r.functions}
    ts, step = fns["train_step"], fns["Net.step"]
    assert ts.trace_count == 3 and len(ts.trace_seconds) == 3
    assert all(PAUSE <= s < PAUSE + 5 for s in ts.trace_seconds), ts.trace_seconds
    assert [t.kind for t in step.traces] == ["first", "variable_creation"]
    assert all(s >= PAUSE for s in step.trace_seconds), step.trace_seconds
    # 2 + 3 traces of >= PAUSE, plus PAUSE of sleep outside any trace
    assert r.wall_seconds >= 6 * PAUSE
    assert ts.seconds + step.seconds < r.wall_seconds
    text = r.to_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("trace time: train_step"))
    m = re.fullmatch(r"trace time: train_step: 3 traces, (\d+\.\d+) s of the script's (\d+\.\d+) s \((\d+)%\)",
                     line)
    assert m, line
    assert int(m.group(3)) == round(100 * ts.seconds / r.wall_seconds)
    assert re.search(r"^  trace time: \d+\.\d+ s \(#1 \d+\.\d+ s, #2 \d+\.\d+ s, #3 \d+\.\d+ s; ", text, re.M)
    d = r.to_dict()
    assert d["wall_seconds"] == r.wall_seconds
    f = next(f for f in d["functions"] if f["function"] == "train_step")
    assert f["trace_seconds"] == list(ts.trace_seconds) and f["seconds"] == ts.seconds


def test_the_html_timeline_shows_the_seconds(script_result):
    from tflab.report.html.timeline import script_groups, timeline_fragment

    page = timeline_fragment(script_groups(script_result))
    ts = next(f for f in script_result.functions if f.function_name == "train_step")
    m = re.search(r"""<p class="trace-time" data-seconds="([0-9.]+)">trace time: \d+\.\d+ s of the script(&#x27;|')s""",
                  page)
    assert m and float(m.group(1)) == pytest.approx(ts.seconds, abs=1e-5), page[:2000]
    assert "<th>seconds</th>" in page
    # the script's calls were counted: the mark says which call traced (as the text's "in 5 call(s)")
    assert re.search(r"<title>#2 retrace at call \d+, \d+\.\d+ s: x: shape \(1,\) -&gt; \(2,\)</title>", page), \
        page[:3000]


def test_the_cli_json_carries_the_seconds(script_result, tmp_path, capsys):
    from tflab.cli import main

    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    assert main(["retrace", "--json", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    f = next(f for f in out["functions"] if f["function"] == "train_step")
    assert len(f["trace_seconds"]) == 3 and all(s >= PAUSE for s in f["trace_seconds"])
    assert out["wall_seconds"] >= 6 * PAUSE
