"""Child processes: the one supervisor, memory limits and the parent watch.

Modules: `supervisor` (``tflab`` runs each verb in a child; `start_tied`,
`ChildGroup`, `ChildChannel`, `guarded`, `watch_parent`), `memory`
(`check_fits`: the own cgroup's limit and RLIMIT_AS). Import the module you
need; the package root imports none of them.
"""
