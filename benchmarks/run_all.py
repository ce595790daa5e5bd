"""``make bench``: every benchmark in one process, one after the other, into ``latest.csv`` and ``latest.md``.

Each benchmark also writes its own ``<name>.csv`` / ``<name>.md``. A benchmark that fails (for example a
multi-rank run whose launcher is missing) becomes one FAILED row and the others still run.

Run: ``python -m benchmarks.run_all [--quick] [--only pgd,suite]``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

import torch

from benchmarks import (
    bench_forward,
    bench_frontend,
    bench_pgd,
    bench_ranks,
    bench_square,
    bench_suite,
    bench_train,
)
from benchmarks.harness import Row, machine_facts, markdown_table, parser, write_outputs

BENCHES: dict[str, Callable] = {
    "pgd": bench_pgd.bench,
    "suite": bench_suite.bench,
    "square": bench_square.bench,
    "frontend": bench_frontend.bench,
    "forward": bench_forward.bench,
    "ranks": bench_ranks.bench,
    "train": bench_train.bench,
}
log = logging.getLogger("benchmarks")


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(BENCHES), help=f"comma-separated subset of {list(BENCHES)}")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("robustbench_wave").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {list(BENCHES)}")
    facts = machine_facts()
    rows: list[Row] = []
    for name in names:
        t0 = time.perf_counter()
        try:
            new = BENCHES[name](args)
        except Exception as err:  # one broken benchmark must not hide the others' numbers
            log.exception("benchmark %s failed", name)
            new = [Row(name, "-", "-", float("nan"), "-", "-", float("nan"), 0, f"FAILED: {err}"[:200])]
        write_outputs(new, facts, args.out, name)
        rows += new
        log.info("%s: %.0f s", name, time.perf_counter() - t0)
    facts["load_avg_1m_end"] = machine_facts()["load_avg_1m"]
    write_outputs(rows, facts, args.out, "latest")
    sys.stdout.write(markdown_table(rows, facts))


if __name__ == "__main__":
    main()
