"""
Queries across runs (issue 22): the filter language of `GET /api/v1/runs?filter=&sort=&columns=`.

    language.py       the expression language, parsed by hand into a small tree (pure)
    config_values.py  a run's config text (JSON, TOML, YAML) as the values a filter reads (pure)

The SQL they compile to lives in store/run_query.py.
"""
