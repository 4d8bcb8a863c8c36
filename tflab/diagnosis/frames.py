"""The frames of a failed trace: every traceback frame with its locals, and the user's own site.

TF raises each mistake from one place whose frame's locals hold the objects
involved (AutoGraph's ``verify_*`` checks, ``Tensor._disallow_*``,
``capture_by_value``, ``op_def_library``); the rules find that frame by name.
"""

from __future__ import annotations

import dataclasses


# --------------------------------------------------------------------------- frames


@dataclasses.dataclass
class Frame:
    filename: str
    lineno: int
    name: str
    locals: dict


def traceback_frames(exc: BaseException) -> list[Frame]:
    """Every traceback frame of ``exc``, outermost first, with its locals.

    AutoGraph re-raises an error from converted code as a new exception of the
    same type (``ag_error_metadata.to_exception``, ``autograph/impl/api.py``)
    whose traceback stops at the re-raise; the original, with the raising
    frames, is its ``__context__``. Those frames are appended after.
    """
    out = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            f = tb.tb_frame
            try:
                loc = dict(f.f_locals)
            except Exception:  # a frame whose locals cannot be read
                loc = {}
            out.append(Frame(f.f_code.co_filename, tb.tb_lineno, f.f_code.co_name, loc))
            tb = tb.tb_next
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or not (type(nxt) is type(exc) or hasattr(exc, "ag_error_metadata")):
            break
        exc = nxt
    return out


def is_generated(filename: str) -> bool:
    return "__autograph_generated" in filename


def is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<") or is_generated(filename):
        return False
    from tflab._user.usercode import is_library_file

    return not is_library_file(filename)  # by where the file lives, not by words in its path


def user_site(exc: BaseException, frames: list[Frame]) -> tuple[str, int | None, dict]:
    """(file, line, locals) of the innermost user frame.

    Converted code runs from AutoGraph's generated file; its errors carry
    ``ag_error_metadata.translated_stack`` with the frames mapped back to the
    user's lines. The locals come from the innermost raw frame that is user
    code or AutoGraph-generated code (the generated function keeps the user's
    variable names).
    """
    loc: dict = {}
    # Frames before the first TF frame are the caller's (the line that called
    # get_concrete_function), not the function's code.
    from tflab._user.usercode import library_of

    first_tf = next((i for i, fr in enumerate(frames) if library_of(fr.filename) == "tensorflow"), 0)
    frames = frames[first_tf:]
    for fr in reversed(frames):
        if is_user_file(fr.filename) or is_generated(fr.filename):
            loc = fr.locals
            if is_user_file(fr.filename):
                # Unconverted user code (autograph=False, do_not_convert, a helper
                # AutoGraph skipped) runs from the user's file: its line is real.
                return fr.filename, fr.lineno, loc
            break
    meta = getattr(exc, "ag_error_metadata", None)
    for fr in reversed(getattr(meta, "translated_stack", None) or ()):
        if is_user_file(fr.filename):
            return fr.filename, fr.lineno, loc
    for fr in reversed(frames):
        if is_user_file(fr.filename):
            return fr.filename, fr.lineno, loc
    return "", None, loc


def frame_named(frames: list[Frame], *names: str) -> Frame | None:
    for fr in reversed(frames):
        if fr.name in names:
            return fr
    return None

