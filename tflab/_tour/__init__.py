"""Tour sections: one module per lab step, each defining ``run(ctx: TourContext) -> None``.

`tflab.tour` runs them in order. A section prints a compact readable block
through ``ctx.section(title)`` / ``ctx.line(text)``, records its numbers
under ``ctx.report[<key>]`` (written as JSON), and writes files only under
``ctx.out_dir``.
"""
