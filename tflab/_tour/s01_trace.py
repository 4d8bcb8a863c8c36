"""Tour step 1: trace the model's inference function and read its FuncGraph."""

from __future__ import annotations


def run(ctx) -> None:
    from tflab.models import model_input_spec
    from tflab.tracing import trace_and_inspect

    model = ctx.model
    spec = model_input_spec(model)

    def serve(x):
        return model(x, training=False)

    report = trace_and_inspect(serve, spec)
    ctx.shared["input_spec"] = spec
    ctx.shared["serve"] = serve
    from tflab._io.paths import output_path

    ctx.shared["trace_report"] = report  # the --html page draws it; --tensorboard writes it
    dot_path = ctx.out_dir / "inference.dot"
    output_path(dot_path, "--out", overwrite=True).write(report.to_dot(max_ops=None))
    var_bytes = sum(c.bytes for c in report.variables)
    top = ", ".join(f"{t}×{n}" for t, n in list(report.op_counts.items())[:6])
    ctx.line(f"serve{report._signature_str()} -> {report._outputs_str()}")
    ctx.line(f"{len(report.ops)} ops; top types: {top}")
    size = f"{var_bytes / 1e6:.2f} MB" if var_bytes >= 1e6 else f"{var_bytes:,} bytes"
    ctx.line(f"captures: {len(report.variables)} variables ({size}), "
             f"{len(report.captured_tensors)} eager tensors ({report.baked_bytes:,} bytes baked as Const)")
    cf = ", ".join(sorted({o.type for o in report.control_flow})) or "none"
    ctx.line(f"control-flow ops: {cf}")
    ctx.line(f"FuncGraph DOT: {ctx.final_path(dot_path)}")
    ctx.report["trace"] = {
        "function_type": report.function_type,
        "op_count": len(report.ops),
        "op_counts": report.op_counts,
        "variables": len(report.variables),
        "variable_bytes": var_bytes,
        "captured_tensors": len(report.captured_tensors),
        "baked_bytes": report.baked_bytes,
        "control_flow": [o.type for o in report.control_flow],
        "dot": str(ctx.final_path(dot_path)),
    }
