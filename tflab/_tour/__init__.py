"""Tour sections: one module per lab step, each defining ``run(ctx: TourContext) -> None``.

`tflab.tour` runs them in order. A section prints a compact readable block
through ``ctx.section(title)`` / ``ctx.line(text)``, records its numbers
under ``ctx.report[<key>]`` (written as JSON), and writes files only under
``ctx.out_dir``, through `tflab._io.paths.output_path`. ``ctx.out_dir`` is a
temporary folder renamed to ``--out`` whole when the tour ends; paths shown
to the user go through ``ctx.final_path(path)``.
"""
