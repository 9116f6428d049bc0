"""The statistics behind gagpo's claims about seeds: intervals, tests, multiplicity and the
group-sequential design. Pure numpy and scipy: this package imports no other part of gagpo, and
``gagpo_cli.report`` and ``gagpo_cli.sweep`` both build on it (formulas in docs/statistics.md and
docs/sequential.md)."""
