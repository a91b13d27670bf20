#!/usr/bin/env python
"""Formula evaluation cost: 100,000 evaluations of a 10-node expression.

    .venv/bin/python bench/formula.py [--evaluations 100000] [--runs 5]

Baseline in the same run: the same logic written as a plain Python function over the same
context (what a hand-coded rule would cost). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.runtime.formula.compiler import Context, compile_formula

# 10 nodes: IF, AND, >, Amount, 100, ISPICKVAL, Stage, 'Won', ROUND(*, 2) with Amount * 1.2, 0
SOURCE = "IF(AND(Amount > 100, ISPICKVAL(Stage, 'Won')), ROUND(Amount * 1.2, 2), 0)"
ENV = {"amount": "number", "stage": "picklist"}


def hand_written(ctx: Context) -> Decimal:
    amount, stage = ctx.values.get("amount"), ctx.values.get("stage")
    if amount is not None and amount > 100 and stage == "Won":
        return (amount * Decimal("1.2")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return Decimal(0)


def time_per_call(fn: object, ctx: Context, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn(ctx)  # type: ignore[operator]
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--evaluations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    formula = compile_formula(SOURCE, ENV)
    ctx = Context(values={"amount": Decimal("150.50"), "stage": "Won"})
    assert formula.evaluate(ctx) == hand_written(ctx)
    started = time.perf_counter()
    for _ in range(1000):
        compile_formula(SOURCE, ENV)
    compile_us = (time.perf_counter() - started) / 1000 * 1e6
    formula_us = [time_per_call(formula.evaluate, ctx, args.evaluations) for _ in range(args.runs)]
    python_us = [time_per_call(hand_written, ctx, args.evaluations) for _ in range(args.runs)]
    print(
        json.dumps(
            {
                "machine": f"{os.uname().nodename} {os.cpu_count()} cpu, {sys.version.split()[0]}",
                "expression": SOURCE,
                "evaluations_per_run": args.evaluations,
                "formula_us_per_eval_median": round(statistics.median(formula_us), 2),
                "hand_written_us_per_eval_median": round(statistics.median(python_us), 2),
                "ratio": round(statistics.median(formula_us) / statistics.median(python_us), 2),
                "compile_us": round(compile_us, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
