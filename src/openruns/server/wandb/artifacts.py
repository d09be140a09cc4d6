"""
The artifact operations logging a `wandb.Table` makes: the SDK saves each logged table a
second time, as an entry of a `run_table` artifact of the run (CreateArtifact,
CreateArtifactManifest, CreateArtifactFiles, the PUTs, CommitArtifact), with the images of its
cells as entries under `media/`.

openruns keeps no artifact registry: an artifact's id names the run and the SDK's client id
(and its digest), so no table is needed and any replica answers. Its entries are stored as
the run's files: those under `media/` at their path, as the media route serves them
(media.py), the others (the table's copy, the manifest) under `artifacts/<client id>/`.
Reading artifacts back (`use_artifact(...).download()`, linking, the registry) is not served:
those queries name fields the schema lacks and are answered as GraphQL errors.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from ..auth import check_run
from ..errors import ApiError, bad_request
from ..store import runs as store_runs
from ..store.rows import RunRow
from .deps import WireCaller
from .files import check_file_name, upload_url

__all__ = ["RESOLVERS"]

if TYPE_CHECKING:  # graphql-core is imported with the endpoint's first request (graphql.py)
    from graphql import GraphQLResolveInfo

    Info = GraphQLResolveInfo


def _encode(kind: str, run_seq: int, client_id: str, digest: str = "") -> str:
    return base64.b64encode(f"{kind}:{run_seq}:{client_id}:{digest}".encode()).decode()


def _decode(value: object, kind: str) -> tuple[int, str, str]:
    try:
        text = base64.b64decode(str(value), validate=True).decode()
        found, seq, client_id, digest = text.split(":", 3)
        if found == kind and client_id:
            return int(seq), client_id, digest
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise bad_request("invalid_id", f"{str(value)[:80]!r} is not an {kind} id of this server")


async def _run_of(info: Info, run_seq: int) -> tuple[WireCaller, RunRow]:
    caller: WireCaller = info.context
    run = await caller.state.store.read(store_runs.get_run_by_seq, run_seq)
    check_run(caller.principal, run, str(run_seq), write=True)
    assert run is not None
    return caller, run


def _artifact(run_seq: int, client_id: str, digest: str, state: str) -> dict[str, Any]:
    artifact_id = _encode("Artifact", run_seq, client_id, digest)
    return {
        "id": artifact_id,
        "digest": digest,
        "state": state,
        "artifactSequence": {"name": client_id, "latestArtifact": None},
    }


async def create_artifact(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    caller: WireCaller = info.context
    run_id = input.get("runName")
    if not isinstance(run_id, str):
        raise bad_request("invalid_artifact", "createArtifact needs the run (runName)")
    run = await caller.run(input.get("entityName"), run_id, write=True)
    if run is None:
        raise ApiError(404, "not_found", f"no run {run_id!r}")
    client_id = input.get("clientID") or input.get("artifactCollectionName")
    if not isinstance(client_id, str) or not client_id.isalnum():
        raise bad_request("invalid_artifact", "createArtifact needs the SDK's clientID")
    digest = str(input.get("digest") or "")
    return {"artifact": _artifact(run["seq"], client_id, digest, "PENDING")}


async def create_manifest(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    run_seq, client_id, digest = _decode(input["artifactID"], "Artifact")
    return await _manifest(info, run_seq, client_id, digest)


async def update_manifest(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    run_seq, client_id, digest = _decode(input["artifactManifestID"], "ArtifactManifest")
    return await _manifest(info, run_seq, client_id, digest)


async def _manifest(info: Info, run_seq: int, client_id: str, digest: str) -> dict[str, Any]:
    caller, run = await _run_of(info, run_seq)
    name = f"artifacts/{client_id}/wandb_manifest.json"
    file = {
        "id": _encode("File", run_seq, client_id),
        "name": name,
        "directUrl": "",
        "uploadUrl": upload_url(caller.request, caller.state, run, name),
        "uploadHeaders": [],
    }
    manifest_id = _encode("ArtifactManifest", run_seq, client_id, digest)
    return {"artifactManifest": {"id": manifest_id, "file": file}}


async def create_files(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    specs = input.get("artifactFiles")
    if not isinstance(specs, list):
        raise bad_request("invalid_artifact", "createArtifactFiles needs artifactFiles")
    edges = []
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise bad_request("invalid_artifact", "each artifact file needs a name")
        run_seq, client_id, _ = _decode(spec.get("artifactID"), "Artifact")
        caller, run = await _run_of(info, run_seq)
        entry = check_file_name(spec["name"])
        # Entries under media/ (a table's images) are the run's media, at their path.
        name = entry if entry.startswith("media/") else f"artifacts/{client_id}/{entry}"
        node: dict[str, Any] = {
            "id": _encode("File", run_seq, client_id),
            "name": entry,
            "directUrl": "",
            "storagePath": name,
            "uploadUrl": upload_url(caller.request, caller.state, run, name),
            "uploadHeaders": [],
            "uploadMultipartUrls": None,
            "artifact": {"id": spec["artifactID"]},
        }
        edges.append({"node": node})
    return {"files": {"pageInfo": {"hasNextPage": False, "endCursor": None}, "edges": edges}}


async def commit_artifact(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    run_seq, client_id, digest = _decode(input["artifactID"], "Artifact")
    await _run_of(info, run_seq)
    return {"artifact": _artifact(run_seq, client_id, digest, "COMMITTED")}


async def same_artifact(_: Any, info: Info, input: dict[str, Any]) -> dict[str, Any]:
    """useArtifact / updateArtifact: accepted, nothing kept (no artifact lineage)."""
    run_seq, client_id, digest = _decode(input.get("artifactID"), "Artifact")
    await _run_of(info, run_seq)
    return {"artifact": _artifact(run_seq, client_id, digest, "COMMITTED")}


def no_artifact(_: Any, info: Info, **arguments: Any) -> None:
    """Artifacts looked up by name or id: none (the registry is not served); the SDK then
    saves the table as a new artifact."""
    return None


RESOLVERS: dict[str, dict[str, Any]] = {
    "Query": {"artifact": no_artifact, "clientIDMapping": no_artifact},
    "Project": {"artifact": no_artifact, "artifactType": no_artifact},
    "Mutation": {
        "createArtifact": create_artifact,
        "createArtifactManifest": create_manifest,
        "updateArtifactManifest": update_manifest,
        "createArtifactFiles": create_files,
        "commitArtifact": commit_artifact,
        "useArtifact": same_artifact,
        "updateArtifact": same_artifact,
    },
}
