"""Child processes: the one supervisor, helpers tied to tflab, the result channel, settings, memory.

Modules:

* `supervisor`: ``tflab`` runs each verb in a child (`run_child`,
  `describe_end`, the child's `ChildChannel`: its live report stream and
  status lines).
* `group`: helpers that die with tflab (`start_tied`, `ChildGroup`,
  `guarded`, `kill_orphans`).
* `watch`: a child's own watch on its parent (`watch_parent`).
* `channel`: the one way a helper hands a result back (`send_result`,
  `receive_result`): one committed file per result in a folder the parent
  owns, arrays as ``.npz`` and objects as a pickle beside it.
* `settings`: every ``TFLAB_*`` environment variable, declared once
  (`SETTINGS`, `get`); ``tflab env`` prints the table.
* `memory`: `check_fits` (the own cgroup's limit and RLIMIT_AS).
* `xla_probe`: `check_xla_flags` (XLA's flags tried in a child first).

Import the module you need; the package root imports none of them.
"""
