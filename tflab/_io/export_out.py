"""``export --out`` (and ``export_model(out=...)``): the rules its folder follows before any work.

`check_out` is one export's: ``force`` replaces only a previous tflab export. Its messages name the
options as the caller spelled them: ``--out``/``--force`` on the command line, ``out``/``force=True``
from Python (`tflab.errors.in_cli`).
"""

from __future__ import annotations

from pathlib import Path

from tflab._io.path_checks import check_path_text, check_tf_path_text, describe_existing
from tflab._io.paths import OutputPath, output_path
from tflab.errors import UsageError


def _check_out(out: Path, force: bool, flag: str, forcing: str) -> OutputPath:
    check_path_text(out, flag)  # a NUL byte or a too-long name: one line, not os.stat's traceback
    check_tf_path_text(out, flag)  # TF writes the SavedModel through a UTF-8 path
    from tflab._io.paths import check_not_parent_ref

    check_not_parent_ref(out, flag)
    what = describe_existing(out)
    if what not in (None, "a folder", "a regular file", "a dangling symlink"):
        # A FIFO, a device or a symlink loop: --force never replaces those, so do not offer it.
        raise UsageError(f"{flag} {out} is {what}, not an export folder; choose another {flag}")
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"{out} already exists: pass {forcing} to replace it, or choose another {flag}")
        real, cwd = out.resolve(), Path.cwd().resolve()
        if not out.is_dir():
            raise UsageError(f"{flag} {out} is {what or 'a file'}, not an export folder: {forcing} replaces only "
                             f"a previous tflab export; choose another {flag}")
        if real == cwd or real in cwd.parents:
            raise UsageError(f"{flag} {out} is the current folder or one of its parents: {forcing} will not "
                             f"replace it; choose a new folder")
        if not (out / "report.json").is_file():
            raise UsageError(f"{flag} {out} is a folder that is not a tflab export (no report.json): {forcing} "
                             f"replaces only previous exports; choose another {flag}")
    # Probes by really creating a folder there: os.access says yes for root on
    # read-only or virtual file systems (/proc). Missing parents are created only
    # once the export starts, and removed again if it fails.
    # Without --force the publishing rename is exclusive: two exports racing to the same new
    # --out cannot both succeed (the second gets "already exists", exit 2).
    return output_path(out, flag, folder=True, exclusive=not force, noun="export")


def check_out(out: Path, force: bool) -> OutputPath:
    """Checks ``--out`` before any work: its parent must be (or become) a writable folder.

    ``force`` replaces only a previous tflab export (a folder holding ``report.json``), never a
    file, the current folder or one of its parents.

    Returns:
        The probed `tflab._io.paths.OutputPath` to write the export through.

    Raises:
        UsageError: one line saying what is wrong with ``out``, naming the options as the caller
            spells them (``--out``/``--force`` in a CLI verb, else ``out``/``force=True``).
    """
    from tflab.errors import in_cli

    cli = in_cli()
    return _check_out(out, force, "--out" if cli else "out", "--force" if cli else "force=True")
