"""
Retention (issue 22): after N days a run keeps its metrics, summary, config, logs and a
bounded, deterministic sample of its episodes; the rest are dropped, rows and bytes.

- `rules.py`: the policy as the settings give it, the most specific rule of a run, the sample
  (pure, standard library only).
- `reduce.py`: one pass: the runs due, each claimed, planned and reduced in slices (segments
  rewritten or deleted), its record written.
- `routes.py`: `GET /api/v1/runs/{id}/retention`.
- `cli.py`: `openruns server retention [--dry-run] [--json]`.

The SQL is in store/retention.py.
"""
