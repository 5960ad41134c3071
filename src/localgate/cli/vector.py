"""``localgate rag`` (ingest, query, list, delete collections) and ``localgate cache``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from localgate.cache.admin import cache_stats, clear_cache
from localgate.cli.options import config_option, load_or_exit
from localgate.config import Settings
from localgate.errors import ConfigError, InvalidArgument, LocalgateError
from localgate.identity.keys import TENANT_FORMAT
from localgate.rag.documents import SUPPORTED_SUFFIXES, find_documents
from localgate.rag.library import SHARED, FileProblem, Library, Progress
from localgate.vectorstore.embedders import build_embedder
from localgate.vectorstore.store import VectorStore, check_collection_name

__all__ = ["cache", "rag"]


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
    if value is not None and not TENANT_FORMAT.match(value):
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


def _whose(tenant: str) -> str:
    return "shared by every tenant" if tenant == SHARED else f"of tenant {tenant}"


@contextmanager
def _store(ctx: click.Context) -> Iterator[VectorStore]:
    """The configured store, closed afterwards; its errors become clean CLI errors."""
    store = VectorStore(ctx.obj)
    try:
        yield store
    except LocalgateError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        store.close()


@contextmanager
def _library(ctx: click.Context) -> Iterator[tuple[VectorStore, Library]]:
    """The store and the library on it; library errors become clean CLI errors."""
    settings: Settings = ctx.obj
    try:
        embedder = build_embedder(settings.embeddings)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    with _store(ctx) as store:
        yield store, Library(settings, store, embedder)


@click.group()
@config_option
@click.pass_context
def rag(ctx: click.Context, config_path: Path | None) -> None:
    """Local retrieval: ingest documents, search them, list and delete collections."""
    ctx.obj = load_or_exit(config_path)[0]


@rag.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@_collection_option
@_tenant_option
@_json_option
@click.pass_context
def ingest(
    ctx: click.Context, paths: tuple[Path, ...], collection: str, tenant: str | None, as_json: bool
) -> None:
    """Redact, embed and store documents (.txt .md .html .pdf; folders are walked).

    A file stored before is replaced. A file in which the tenant's policy blocks
    something is refused whole. Exits 1 if any file was refused or unreadable.
    """
    owner = SHARED if tenant is None else tenant
    files = find_documents(paths)
    if not files:
        raise click.ClickException(
            f"no documents found; supported types are {', '.join(SUPPORTED_SUFFIXES)}"
        )
    with _library(ctx) as (store, library), _progress_bar(len(files)) as progress:
        report = store.sync(library.ingest, owner, collection, files, progress)
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
            f"{collection!r} {_whose(owner)}."
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
@click.pass_context
def query(
    ctx: click.Context,
    text: str,
    collection: str,
    tenant: str | None,
    top_k: int | None,
    min_similarity: float | None,
    as_json: bool,
) -> None:
    """Search a collection as the gateway would for TEXT (redacted first), best first."""
    owner = SHARED if tenant is None else tenant
    with _library(ctx) as (store, library):
        passages = store.sync(library.query, owner, collection, text, top_k, min_similarity)
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
@click.option(
    "--tenant", default=None, help="Only the collections this tenant searches (and shared ones)."
)
@_json_option
@click.pass_context
def list_collections(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """List retrieval collections: owner, name, chunks, embedder."""
    with _library(ctx) as (store, library):
        infos = store.sync(library.collections, tenant)
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
@_collection_option
@_tenant_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def delete(ctx: click.Context, collection: str, tenant: str | None, yes: bool) -> None:
    """Delete a collection and every passage in it (in every embedding space)."""
    owner = SHARED if tenant is None else tenant
    with _library(ctx) as (store, library):
        found = [
            info
            for info in store.sync(library.collections, owner)
            if info.tenant == owner and info.collection == collection
        ]
        if not found:
            raise click.ClickException(f"no retrieval collection {collection!r} {_whose(owner)}")
        chunks = sum(info.count for info in found)
        if not yes:
            click.confirm(
                f"Delete collection {collection!r} {_whose(owner)} ({chunks} chunks)?",
                abort=True,
            )
        store.sync(library.delete, owner, collection)
    click.echo(f"Deleted collection {collection!r} {_whose(owner)}.")


@click.group()
@config_option
@click.pass_context
def cache(ctx: click.Context, config_path: Path | None) -> None:
    """The local answer cache: what it holds, and clearing it."""
    ctx.obj = load_or_exit(config_path)[0]


@cache.command()
@click.option("--tenant", default=None, help="Only this tenant's entries.")
@_json_option
@click.pass_context
def stats(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Entries per tenant and embedder, how many have expired, and for which models.

    Hits and misses are counted by the running gateway: see its /metrics
    (localgate_cache_lookups_total).
    """
    with _store(ctx) as store:
        found = store.sync(cache_stats, store, tenant)
    if as_json:
        for entry in found:
            click.echo(
                json.dumps(
                    {
                        "tenant": entry.tenant,
                        "embedder": entry.embedder,
                        "entries": entry.entries,
                        "expired": entry.expired,
                        "models": entry.models,
                    },
                    ensure_ascii=False,
                )
            )
        return
    if not found:
        click.echo("The cache is empty.")
        return
    click.echo(f"{'TENANT':<20}{'ENTRIES':>9}{'EXPIRED':>9}  EMBEDDER / MODELS")
    for entry in found:
        models = ", ".join(f"{model} {count}" for model, count in sorted(entry.models.items()))
        click.echo(
            f"{entry.tenant:<20}{entry.entries:>9}{entry.expired:>9}  {entry.embedder} / {models}"
        )


@cache.command()
@click.option("--tenant", default=None, help="Only this tenant's entries (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def clear(ctx: click.Context, tenant: str | None, yes: bool) -> None:
    """Drop cached answers; a running gateway sees it before its next lookup."""
    whose = f"of tenant {tenant}" if tenant else "of every tenant"
    if not yes:
        click.confirm(f"Drop the cached answers {whose}?", abort=True)
    with _store(ctx) as store:
        dropped = store.sync(clear_cache, store, tenant)
    click.echo(f"Dropped {len(dropped)} cache collection(s) {whose}.")
