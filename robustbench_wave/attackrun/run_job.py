"""Running a prepared :class:`~robustbench_wave.attackrun.job.Job`: every model through
:func:`~robustbench_wave.evaluation.evaluate`, on the whole run or on one shard of it, then the run's records,
meta.json and tables (rank 0 after gathering the ranks' shards), or a ``--shard`` job's folder for
``report merge``; finally the diagnostics. The table is printed once: after the gradient-masking checklist,
with its marks (:func:`~robustbench_wave.attackrun.finalize.finalize_run`), or, with no checklist to run
(``--no-diagnostics``), at the end of the suite with a line saying that no cell is verified.

torchrun's ranks are the shards of one run; ``--shard i/n`` is one shard as its own job; else one process
evaluates the whole run. Each shard owns whole seeding blocks, so the merged records are a single process's
(:mod:`robustbench_wave.evaluation.sharding`).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from robustbench_wave.attackrun.finalize import ShardFinalize, echo_table, finalize_run
from robustbench_wave.attackrun.folder import CHUNKS_DIR, claim, run_meta
from robustbench_wave.attackrun.job import Job
from robustbench_wave.attackrun.models import Loaded
from robustbench_wave.attackrun.run_escalation import Surrogate
from robustbench_wave.attackrun.settings import RunRefused, RunSettings
from robustbench_wave.core.distributed import DistContext, all_gather_object, barrier
from robustbench_wave.core.tracking import attack_log_dir, log_attack_tables, preformatted
from robustbench_wave.data import LabelledImages
from robustbench_wave.evaluation import EvaluationResult, evaluate
from robustbench_wave.evaluation.chunks import tensor_sha256
from robustbench_wave.evaluation.sharding import (
    SHARD_META_KEY,
    Shard,
    ShardJob,
    merge_results,
    rank_count,
    shard_dir,
)
from robustbench_wave.evaluation.trust import Trust
from robustbench_wave.reporting import tables

log = logging.getLogger(__name__)

#: Columns of the cross-check table printed on the terminal.
CROSSCHECK_COLUMNS = [
    "model", "grad_mode", "attack", "eps", "primary_backend", "backend", "n_points", "difference",
    "n_only_backend", "n_only_primary",
]  # fmt: skip


def choose_shard(shard: str | None, ctx: DistContext) -> Shard:
    """torchrun's ranks are the shards; ``--shard i/n`` is one shard as its own job; else the whole run."""
    if ctx.distributed and shard:
        raise RunRefused(
            "--shard is for jobs started without torchrun; under torchrun the ranks are the shards"
        )
    if ctx.distributed:
        return Shard(ctx.rank, ctx.world_size)
    try:
        return Shard.parse(shard) if shard else Shard()
    except ValueError as err:
        raise RunRefused(str(err)) from None


def rank_shard(job: Job, ctx: DistContext) -> Shard | None:
    """This rank's shard under torchrun: ranks are capped by the run's seeding blocks (a shard owns whole
    blocks), so with more ranks than blocks the extra ranks evaluate nothing (None) and only wait for the
    others; rank 0 says so in the log."""
    n, block = len(job.data), job.suite.rng_block
    count = rank_count(n, block, ctx.world_size)
    if count < ctx.world_size and ctx.is_main:
        log.warning(
            "%d ranks, but %d examples make %d seeding blocks of %d: ranks %d-%d idle (a shard owns whole blocks)",
            ctx.world_size, n, count, block, count, ctx.world_size - 1,
        )  # fmt: skip
    return Shard(ctx.rank, count) if ctx.rank < count else None


def check_shards(job: Job, shards: list[Shard]) -> None:
    """Every shard that will run owns at least one seeding block of examples (checked before any write)."""
    n, block = len(job.data), job.suite.rng_block
    for shard in shards:
        if not shard.is_whole and not len(shard.positions(torch.arange(n), block)):
            raise RunRefused(
                f"shard {shard.index}/{shard.count} has no examples: {n} examples make {-(-n // block)} "
                f"seeding blocks of {block}; use n <= {-(-n // block)} shards"
            )


def _model_extra(
    settings: RunSettings, tmeta: dict[str, Any], surrogate_note: str | None = None
) -> dict[str, Any]:
    """What meta.json records about a model beyond what evaluate measures: its training run and spec, and
    how ``--surrogate auto`` chose its surrogate (only then)."""
    return (
        {
            "checkpoint_sha256": tmeta.get("checkpoint_sha256"),
            "checkpoint_dir": tmeta.get("run_dir"),
            "train_seed": tmeta.get("train_seed", settings.train_seed),  # None: an external model
            "train_test_accuracy": tmeta.get("clean_accuracy"),
            "spec_sha256": tmeta.get("spec_sha256"),
            "model_spec": tmeta.get("model_spec"),
        }
        | ({"external": tmeta["external"]} if "external" in tmeta else {})
        | ({"surrogate_choice": surrogate_note} if surrogate_note else {})
    )


def _spec_ids(tmeta: dict[str, Any], surrogate: Loaded | None) -> dict[str, str]:
    """The spec hashes that join the chunk fingerprint (none known: the fingerprint is as before)."""
    ids = {
        "model": tmeta.get("spec_sha256"),
        "surrogate": surrogate[1].get("spec_sha256") if surrogate else None,
    }
    return {k: v for k, v in ids.items() if v}


def _summary_line(name: str, result: EvaluationResult) -> str:
    m = result.meta["models"][name]
    return (
        f"{name}: clean accuracy {m['clean_accuracy']:.4f}, {m['seconds_total']:.0f} s "
        f"(attacks took {m['seconds_attacks']:.0f} s when computed; {m['resumed_chunks']} chunks resumed)"
    )


def attack_models(
    job: Job,
    data: LabelledImages,
    cache_dir: Path,
    *,
    device: torch.device,
    progress: bool,
    example_ids: torch.Tensor | None = None,
) -> list[EvaluationResult]:
    """Run the suite on every model of ``job`` in turn; finished chunks are cached in ``cache_dir``.

    ``device`` and ``progress`` change only speed and display, never the records; ``example_ids`` (default
    ``0..N-1``) are the ids of ``data``'s images in the whole run (a shard's slice).
    """
    settings, surrogate = job.settings, job.surrogate
    sur_name = settings.key(settings.surrogate) if surrogate is not None else None
    results = []
    for name, (model, tmeta) in job.models.items():
        model.to(device)
        sur = surrogate[0].to(device) if surrogate is not None else None
        if sur is model:
            log.info("%s is its own surrogate: the transfer attack is a white-box attack here", name)
        eval_settings = settings.eval_settings(name, data.info, job.modes[name])
        common: dict[str, Any] = {
            "example_ids": example_ids,
            "batch_size": job.options.batch_size,
            "progress": progress,
            "cache_dir": cache_dir,
            "save_adversarial": settings.save_adversarial,
            "specs": _spec_ids(tmeta, surrogate),
        }
        result = evaluate(  # escalated where the scan found the gradient lost or unhandled
            model, data.images, data.labels, job.suite, eval_settings, escalation=settings.escalates,
            surrogate=sur, surrogate_name=sur_name,
            extra_meta=_model_extra(settings, tmeta, job.surrogate_note), **common,
        )  # fmt: skip
        results.append(result)
        job.echo(_summary_line(name, result))
    return results


def evaluate_shard(job: Job, shard: Shard, ctx: DistContext) -> EvaluationResult:
    """Attack this shard's examples (all of them for the whole run) with every model, chunks cached."""
    if shard.is_whole:
        data, ids, cache = job.data, None, job.run_dir / CHUNKS_DIR
    else:
        ids = shard.positions(torch.arange(len(job.data)), job.suite.rng_block)
        data, cache = job.data.subset(ids), shard_dir(job.run_dir, shard) / CHUNKS_DIR
    progress = job.options.progress and ctx.is_main
    results = attack_models(job, data, cache, device=ctx.device, progress=progress, example_ids=ids)
    merged = EvaluationResult.merge(results)
    merged.meta["provenance"]["execution"] = {
        **ctx.provenance(),
        "rank": ctx.rank,
        "shard": None if shard.is_whole else f"{shard.index}/{shard.count}",
    }
    return merged


def run_data_sha256(data: LabelledImages) -> str:
    """The ``data_sha256`` one process records for the whole run (images, labels, ids ``0..N-1``)."""
    return tensor_sha256(data.images.detach().float(), data.labels.long().view(-1), torch.arange(len(data)))


def write_run(job: Job, merged: EvaluationResult) -> None:
    """records.csv.gz, meta.json and the tables of the whole run; the report comes after, and the table is
    printed with the checklist's marks after it (printed here, saying no cell is verified, when none runs)."""
    merged.meta["run"] = run_meta(job.run_dir, job.command, job.config)
    paths = merged.save(job.run_dir)
    marks = dict(Trust.from_run(merged.meta, None).marks) or None  # a lost gradient; the checklist's later
    paths |= tables.write_tables(merged.records, job.run_dir, meta=merged.meta, marks=marks)
    _print_results(job, merged, paths)
    if job.options.tensorboard is not None:
        _track_tables(job.options.tensorboard, job.data.info.slug, job.run_dir, paths)


def _print_results(job: Job, merged: EvaluationResult, paths: dict[str, Path]) -> None:
    """The cross-check and the files written; the table only when no checklist follows (its marks and legend
    come with the checklist: :func:`~robustbench_wave.attackrun.finalize.finalize_run` prints it then)."""
    checklist = job.options.finalize.diagnostics
    if not checklist:  # the table rendered by reporting.tables, and that no checklist will mark it
        echo_table(job.run_dir, job.echo, note=tables.NO_CHECKLIST_NOTE)
    xc = merged.crosscheck()
    if xc is not None and len(xc):  # empty when no point was attacked
        job.echo(
            ("\n" if checklist else "")
            + "cross-check (robust accuracy of the other back-end minus the primary one on the same points; "
            "points only one of them broke; every break counts in the worst case):"
        )
        job.echo(xc[CROSSCHECK_COLUMNS].to_string(index=False))
    job.echo(f"\nwrote {job.run_dir}: " + ", ".join(sorted(p.name for p in paths.values())))
    if checklist:
        job.echo("gradient-masking checklist next; the table follows it, with its marks")


def _track_tables(root: Path, slug: str, run_dir: Path, paths: dict[str, Path]) -> None:
    """``--tensorboard``: a copy of the tables just written, read back from their files."""
    summary = pd.read_csv(paths["summary"])
    texts = {
        "robust_accuracy/table": preformatted(paths["text"].read_text(encoding="utf-8")),
        "robust_accuracy/summary": tables.markdown_table(summary),
    }
    log_attack_tables(attack_log_dir(root, slug, run_dir.name), summary, texts)


def run_ranks(job: Job, shard: Shard, ctx: DistContext) -> None:
    """Every rank evaluates its shard (the whole run in one process; none on a rank beyond the run's seeding
    blocks: :func:`rank_shard`); rank 0 merges and writes the run."""
    if not ctx.distributed:
        write_run(job, evaluate_shard(job, shard, ctx))
        return
    mine = rank_shard(job, ctx)
    result = None if mine is None else evaluate_shard(job, mine, ctx)
    gathered = [(s, r) for s, r in all_gather_object(ctx, (mine, result)) if s is not None]
    if ctx.is_main:
        merged = merge_results(
            [r for _, r in gathered],
            [s for s, _ in gathered],
            range(len(job.data)),
            run_data_sha256(job.data),
        )
        write_run(job, merged)
    barrier(ctx)


def run_shard_job(job: Job, shard: Shard, ctx: DistContext) -> None:
    """One ``--shard i/n`` job: its records and meta in RUN/shards/i-of-n/, merged later by the report CLI."""
    folder = shard_dir(job.run_dir, shard)
    result = evaluate_shard(job, shard, ctx)
    result.meta["run"] = run_meta(job.run_dir, job.command, job.config)
    result.meta[SHARD_META_KEY] = ShardJob(
        index=shard.index,
        count=shard.count,
        example_ids=shard.positions(torch.arange(len(job.data)), job.suite.rng_block).tolist(),
        run_n_examples=len(job.data),
        run_data_sha256=run_data_sha256(job.data),
        results_dir=str(job.options.results_dir),
        finalize=ShardFinalize(
            job.options.finalize, job.options.batch_size, job.settings.evaluation.seed
        ).to_dict(),
    ).to_dict()
    paths = result.save(folder)
    job.echo(
        f"wrote shard {shard.index}/{shard.count} of {job.run_dir}: {folder} ({', '.join(sorted(paths))})"
    )
    job.echo(f"when every shard is done: python -m robustbench_wave.report merge {job.run_dir}")


def run_job(job: Job, shard: Shard, ctx: DistContext) -> None:
    """Hold the run's folder (a ``--shard`` job: its shard's folder) while this command writes there, run
    the job's shard(s), then (rank 0, unless turned off) diagnose the finished run."""
    with ExitStack() as stack:
        if not ctx.distributed and not shard.is_whole:
            claim(shard_dir(job.run_dir, shard), job.config, job.options.overwrite, ctx, stack)
            run_shard_job(job, shard, ctx)
            return
        claim(job.run_dir, job.config, job.options.overwrite, ctx, stack)
        run_ranks(job, shard, ctx)
        if job.options.finalize.diagnostics:  # every rank: they share the escalation after the checklist
            surrogate = Surrogate.of(job.surrogate, job.settings.key(job.settings.surrogate))
            baseline = job.settings.key(job.settings.baseline) if job.settings.baseline else None
            finalize_run(
                job.options.finalize, job.run_dir, job.models, job.data, job.echo,
                batch_size=job.options.batch_size, seed=job.settings.evaluation.seed,
                surrogate=surrogate, baseline=baseline, escalate=job.settings.escalates, ctx=ctx,
            )  # fmt: skip
