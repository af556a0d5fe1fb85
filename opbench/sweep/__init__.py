"""The sweep, read top-down: `driver` expands (shape x pass x dtype x backend) into cases and runs the
interleaved rounds; `visits` decides whether a case runs, then verifies and times each visit;
`caseresult` turns a case's visits into its Result; `verification` checks the first call against float64
and each visit's timed output; `caserun` holds a case's state between visits; `config` is what the sweep
was asked to do and the backends it runs on. Each imports only those after it (pyproject.toml's contract),
and nothing is re-exported here: callers import the module they use.

A case that cannot run (backend missing, dtype unsupported, over the memory budget, predicted to take too
long, an exception, a wrong answer) becomes a Result with an Outcome saying why; it never ends the sweep.
"""
