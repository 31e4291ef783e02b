"""`switchyard serve`'s supervisor: it serves no requests. Every engine and every router replica
is a child process of its own, restarted with backoff on its own port when it dies
(keeper.py), and stopped in order — routers first, so they drain, then engines (stopping.py).

The children outlive the supervisor on purpose: each runs in a session of its own (a terminal's
Ctrl-C reaches the supervisor alone, which stops them in that order) and none asks the kernel to
kill it with its parent, so a supervisor killed with SIGKILL leaves them serving. What it
started is recorded in its run directory (run_dir.py, state.py); a new `serve` on the same
address adopts those children when it was started with the same arguments and stops them first
when it was not (previous_run.py), so two engines never share a port. supervise.py runs it all.
"""
