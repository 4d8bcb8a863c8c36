"""Every report renders as rich output in Jupyter, checked by executing a real notebook.

The notebook is built in code (nbformat) and run headless (nbclient on an
ipykernel kernel). Each cell's last expression is one report; its output's
MIME bundle must hold ``text/html`` (and the plain repr, unchanged), no cell
may hold a traceback, and the TraceReport's SVG must have one node per op of
the traced function, counted independently in the kernel from TF's
``graph.get_operations()``. Skipped with the reason where nbformat, nbclient
or ipykernel is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SETUP = '''
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
import tflab

cpu = tf.config.list_physical_devices("CPU")[0]  # two logical CPUs for MirroredStrategy, before TF starts
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
v = tf.Variable([[1.0, 2.0, 3.0]])

def f(x):
    y = tf.matmul(x, v, transpose_b=True)
    if tf.reduce_sum(y) > 0:
        y = tf.nn.relu(y)
    return tf.reduce_sum(y)

spec = tf.TensorSpec([None, 3], tf.float32)
tf.function(f).get_concrete_function(spec)  # warm; the count below is from a fresh trace
'''

# (report kind, cell source whose last expression is that report)
CELLS = [
    ("TraceReport", "report = tflab.trace_and_inspect(f, spec)\n"
                    "print(len(report.concrete_function.graph.get_operations()))\nreport"),
    ("RetraceProbe", "probe = tflab.RetraceProbe(lambda x: x * 2.0)\n"
                     "for n in (4, 4, 2):\n    probe(tf.ones([n, 3]))\nprobe"),
    ("AutographDiff", "def g(x):\n    if x > 0:\n        return x\n    return -x\n"
                      "tflab.autograph_diff(g, tf.TensorSpec([], tf.float32))"),
    ("ModeComparison", "tflab.compare_modes(lambda a: tf.nn.relu(a) * 3.0, tf.ones([4, 3]), "
                       "modes=('eager', 'graph'), repeats=1, hlo=False)"),
    ("PrecisionComparison", "tflab.compare_precisions(lambda a, b: tf.reduce_sum(a @ b) * 2.0 ** -20, "
                            "tf.ones([8, 64]), tf.fill([64, 4], 2.0 ** -8), loss_scale=2.0 ** 15)"),
    ("Diagnosis", "def bad(x, n):\n    for i in tf.range(n):\n        x = x[: i]\n    return x\n"
                  "tflab.diagnose(bad, tf.TensorSpec([4], tf.float32), tf.TensorSpec([], tf.int32))"),
    ("SavedModelCheck", "class M(tf.Module):\n    def __init__(self):\n        self.w = tf.Variable(2.0)\n"
                        "    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])\n"
                        "    def __call__(self, x):\n        return {'y': x * self.w}\n"
                        "import tempfile\nsm_dir = tempfile.mkdtemp() + '/sm'\n"
                        "batch = {'x': np.arange(4, dtype=np.float32)}\n"
                        "sm = tflab.save_and_reload(M(), sm_dir, batch)\nsm"),
    ("TFLiteCheck", "tflab.tflite_roundtrip(sm_dir, batch, quantization='none')"),
    ("DistributedTraceReport",
     "strategy = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])\n"
     "with strategy.scope():\n    w = tf.Variable(tf.ones([3, 2]))\n"
     "ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(tf.ones([8, 3])).batch(4))\n"
     "def dstep(x):\n    def body(t):\n        return tf.reduce_sum(t @ w)\n"
     "    return strategy.reduce('SUM', strategy.run(body, args=(x,)), axis=None)\n"
     "tflab.inspect_distributed(dstep, ds.element_spec)"),
]

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install 'tflab[test]')")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install 'tflab[test]')")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install 'tflab[test]')")


def _kernel_name() -> str:
    """A kernel spec for this interpreter (the venv's python), installed under the test's user dir if missing."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    return "python3" if "python3" in specs else pytest.skip("no python3 kernel spec (python -m ipykernel install)")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook()
    nb.cells = [new_code_cell(SETUP)] + [new_code_cell(src) for _, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    work = tmp_path_factory.mktemp("nb")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=_kernel_name(),
                                     resources={"metadata": {"path": str(work)}}, allow_errors=True)
    client.execute()  # the python3 kernel of this interpreter (ipykernel's native spec: sys.executable)
    nbformat.write(nb, str(work / "reports.ipynb"))
    return nb, work


def test_every_report_renders_as_html_without_traceback(executed):
    nb, _ = executed
    for cell in nb.cells:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors == [], (cell.source, errors and errors[0].get("ename"), errors and errors[0].get("evalue"))
    for (kind, _), cell in zip(CELLS, nb.cells[1:]):
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert len(results) == 1, (kind, cell.outputs)
        bundle = results[0].data
        assert "text/html" in bundle and "text/plain" in bundle, (kind, list(bundle))
        html = bundle["text/html"]
        assert html.startswith('<div class="tflab">') and "Traceback" not in html, kind
        assert kind in bundle["text/plain"] or kind == "TFLiteCheck", (kind, bundle["text/plain"][:80])
        assert "https://" not in html and "<script src" not in html, kind  # no network in a notebook
        assert len(html.encode()) < 300_000, (kind, len(html))


def test_trace_report_svg_has_one_node_per_op(executed):
    nb, _ = executed
    cell = nb.cells[1]
    printed = int("".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream").split()[0])
    html = next(o for o in cell.outputs if o.output_type == "execute_result").data["text/html"]
    assert html.count('<g class="op ') == printed > 5
    assert "<svg class=\"funcgraph\"" in html and 'class="op-search"' in html


def test_retrace_probe_cell_shows_its_timeline(executed):
    nb, _ = executed
    html = next(o for o in nb.cells[2].outputs if o.output_type == "execute_result").data["text/html"]
    assert html.count('class="trace-mark"') == 2 and "4 -&gt; 2" in html.replace("(4, 3) -&gt; (2, 3)", "4 -&gt; 2")


def test_tflab_imports_without_ipython_in_a_fresh_interpreter():
    """IPython is never needed: blocked from importing, tflab still imports and renders a fragment."""
    code = textwrap.dedent('''
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "IPython" or name.startswith("IPython."):
                    raise ImportError("IPython blocked by the test")
        sys.meta_path.insert(0, Block())
        import tflab
        from tflab.report.html import fragment, page
        assert "<div" in fragment(object())
        assert "IPython" not in sys.modules
        print("ok")
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_ipython_check_can_fail():
    """Planted defect: the same blocker makes an import of IPython fail, so the check above is real."""
    code = textwrap.dedent('''
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "IPython" or name.startswith("IPython."):
                    raise ImportError("IPython blocked by the test")
        sys.meta_path.insert(0, Block())
        import IPython
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "IPython blocked by the test" in out.stderr
