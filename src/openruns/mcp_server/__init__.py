"""
`openruns mcp`: the read API served to coding agents as an MCP server over stdio (issue 22).

    command.py   the command: server options, the missing-extra message; cheap to import
    tools.py     the tools over `openruns.api.Client`, each answer bounded; imports `mcp`

The `mcp` package is the extra `mcp` (`pip install 'openruns[mcp]'`); nothing else in openruns
imports it.
"""
