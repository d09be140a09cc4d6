"""`python -m openruns ...`: the `openruns` command (an agent's MCP config can name the
interpreter: `python -m openruns mcp`)."""

from .cli import main

raise SystemExit(main())
