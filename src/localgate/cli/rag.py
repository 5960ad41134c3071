"""``localgate rag``: ingest documents, search them, list and delete retrieval collections."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from localgate.admin.rag import (
    SHARED,
    FileProblem,
    Progress,
    RagAdmin,
    check_collection_name,
    describe_owner,
    documents_in,
)
from localgate.admin.tenants import is_tenant_name
from localgate.cli.errors import reported
from localgate.cli.options import config_option, group_config_option, load_or_exit
from localgate.config import Settings
from localgate.errors import ConfigError, InvalidArgument

__all__ = ["rag"]


def _collection_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_collection_name(value)
    except InvalidArgument as exc:
        raise click.BadParameter(exc.message, ctx, param) from exc


_collection_option = click.option(
    "--collection",
    required=True,
    callback=_collection_name,
    help="Name of the retrieval collection.",
)


def _tenant_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # An empty --tenant (an unset shell variable) must not mean "shared by every tenant".
    if value is not None and not is_tenant_name(value):
        raise click.BadParameter(
            "a tenant name is 1-64 letters, digits, '.', '_' or '-'; leave --tenant out "
            "for a collection shared by every tenant",
            ctx,
            param,
        )
    return value


_tenant_option = click.option(
    "--tenant",
    default=None,
    callback=_tenant_name,
    help="Tenant owning the collection (default: a collection shared by every tenant).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@contextmanager
def _admin(settings: Settings) -> Iterator[RagAdmin]:
    """The rag admin on the configured store, closed afterwards; its errors are one line."""
    with reported():
        try:
            admin = RagAdmin.open(settings)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
        with admin:
            yield admin


@click.group()
@group_config_option
def rag() -> None:
    """Local retrieval: ingest documents, search them, list and delete collections."""


@rag.command()
@config_option
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@_collection_option
@_tenant_option
@_json_option
def ingest(
    config_path: Path | None,
    paths: tuple[Path, ...],
    collection: str,
    tenant: str | None,
    as_json: bool,
) -> None:
    """Redact, embed and store documents (.txt .md .html .pdf; folders are walked).

    A file stored before is replaced. A file in which the tenant's policy blocks
    something is refused whole. Exits 1 if any file was refused or unreadable.
    """
    settings, _ = load_or_exit(config_path)
    with reported():
        files = documents_in(paths)
    with _admin(settings) as admin, _progress_bar(len(files)) as progress:
        report = admin.ingest(files, collection, tenant, progress)
    owner = SHARED if tenant is None else tenant
    if as_json:
        click.echo(
            json.dumps(
                {
                    "tenant": owner,
                    "collection": collection,
                    "files": report.files,
                    "chunks": report.chunks,
                    "refused": [_problem_json(problem) for problem in report.refused],
                    "failed": [_problem_json(problem) for problem in report.failed],
                },
                ensure_ascii=False,
            )
        )
    else:
        click.echo(
            f"Stored {report.files} file(s), {report.chunks} chunk(s) in collection "
            f"{collection!r} {describe_owner(owner)}."
        )
        for problem in report.refused:
            click.echo(f"refused {problem.path}: {problem.reason}", err=True)
        for problem in report.failed:
            click.echo(f"failed  {problem.path}: {problem.reason}", err=True)
    if not report.ok:
        sys.exit(1)


@contextmanager
def _progress_bar(files: int) -> Iterator[Progress | None]:
    """A progress bar on a terminal, for runs of more than one file; else nothing."""
    if files < 2 or not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=files, label="ingesting", file=sys.stderr) as bar:

        def progress(done: int, total: int, chunks: int) -> None:
            bar.label = f"ingesting ({chunks} chunks)"
            bar.update(done - bar.pos)

        yield progress


def _problem_json(problem: FileProblem) -> dict[str, str]:
    return {"path": problem.path, "reason": problem.reason}


@rag.command()
@config_option
@click.argument("text")
@_collection_option
@_tenant_option
@click.option(
    "--top-k", type=click.IntRange(1, 50), default=None, help="At most this many passages."
)
@click.option(
    "--min-similarity",
    type=click.FloatRange(0, 1),
    default=None,
    help="Leave out passages less similar than this (default: rag.min_similarity).",
)
@_json_option
def query(
    config_path: Path | None,
    text: str,
    collection: str,
    tenant: str | None,
    top_k: int | None,
    min_similarity: float | None,
    as_json: bool,
) -> None:
    """Search a collection as the gateway would for TEXT (redacted first), best first."""
    with _admin(load_or_exit(config_path)[0]) as admin:
        passages = admin.query(text, collection, tenant, top_k, min_similarity)
    for passage in passages:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "id": passage.id,
                        "score": round(passage.score, 4),
                        "source": passage.source,
                        "page": passage.page,
                        "text": passage.text,
                    },
                    ensure_ascii=False,
                )
            )
            continue
        page = "" if passage.page is None else f"  page {passage.page}"
        click.echo(f"{passage.score:.3f}  {passage.id}  {passage.source}{page}")
        for line in passage.text.splitlines():
            click.echo(f"    {line}")
    if not passages and not as_json:
        click.echo("No passage is similar enough.", err=True)


@rag.command("list")
@config_option
@click.option(
    "--tenant", default=None, help="Only the collections this tenant searches (and shared ones)."
)
@_json_option
def list_collections(config_path: Path | None, tenant: str | None, as_json: bool) -> None:
    """List retrieval collections: owner, name, chunks, embedder."""
    with _admin(load_or_exit(config_path)[0]) as admin:
        infos = admin.collections(tenant)
    if as_json:
        for info in infos:
            click.echo(
                json.dumps(
                    {
                        "tenant": info.tenant,
                        "collection": info.collection,
                        "chunks": info.count,
                        "embedder": info.embedder,
                        "space": info.space,
                        "name": info.name,
                    },
                    ensure_ascii=False,
                )
            )
        return
    if not infos:
        click.echo("No retrieval collections.")
        return
    click.echo(f"{'TENANT':<20}{'COLLECTION':<34}{'CHUNKS':>8}  EMBEDDER")
    for info in infos:
        owner = "* (shared)" if info.tenant == SHARED else info.tenant
        click.echo(f"{owner:<20}{info.collection or '':<34}{info.count:>8}  {info.embedder}")


@rag.command()
@config_option
@_collection_option
@_tenant_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(config_path: Path | None, collection: str, tenant: str | None, yes: bool) -> None:
    """Delete a collection and every passage in it (in every embedding space)."""
    with _admin(load_or_exit(config_path)[0]) as admin:
        found = admin.collection(collection, tenant)
        if not yes:
            click.confirm(
                f"Delete collection {collection!r} {describe_owner(found.tenant)} "
                f"({found.chunks} chunks)?",
                abort=True,
            )
        admin.delete(collection, tenant)
    click.echo(f"Deleted collection {collection!r} {describe_owner(found.tenant)}.")
