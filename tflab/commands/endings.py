"""How a verb's run ends when the user's code interrupts it: `user_keyboard_interrupt`."""

from __future__ import annotations

import sys

from tflab.errors import error_line


def user_keyboard_interrupt(verb: str, args, exc: BaseException) -> int | None:
    """Exit 2 and one line for a KeyboardInterrupt of the user's code (no Ctrl-C reached tflab), else None.

    The user's code raised it (no SIGINT came), or signalled its own process (a SIGINT that the
    supervisor, which every Ctrl-C and ``kill -INT`` of tflab reaches, never received).
    """
    from tflab._user.usercode import describe
    from tflab.errors import own_interrupt, sigint_received

    if not own_interrupt():
        return None
    name = next((v for v in (getattr(args, k, None) for k in ("target", "model", "script"))
                 if isinstance(v, str) and v), "user code")
    if sigint_received():
        what = (f"{name} got a SIGINT from inside the run while tflab {verb} ran (your code, or a process it "
                f"started, signalled it; no Ctrl-C reached tflab), so this is your code's interrupt: "
                f"return or raise an Exception instead")
    else:
        what = (f"{describe(exc, name, f'while tflab {verb} ran')}; no Ctrl-C came, so this is your code's "
                f"exception: return or raise an Exception instead")
    print(error_line(verb, what), file=sys.stderr)
    return 2
