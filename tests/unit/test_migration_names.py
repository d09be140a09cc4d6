"""The migration scripts' names carry their revisions: a server reads the newest from the names
(migrate.HEAD) and leaves a database at it alone, without loading Alembic."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from openruns.server.store.migrate import HEAD, SCRIPTS


def test_each_script_is_named_by_its_revision_and_head_is_alembics():
    scripts = ScriptDirectory(str(SCRIPTS))
    revisions = list(scripts.walk_revisions())
    assert revisions, "no migration scripts found"
    for revision in revisions:
        assert revision.path is not None
        name = revision.path.rsplit("/", 1)[-1]
        assert name.startswith(f"{revision.revision}_"), (name, revision.revision)
    assert scripts.get_heads() == [HEAD]
