"""``python -m bench SCENARIO`` (and ``sandbus bench SCENARIO``): the benchmark scenarios of issue
#16 in one entry point, each on sandbus's embedded default with every part its own process, at
each write latency of ``--write-latency-ms`` (0 and 5 ms per write unless told), printing a
Markdown table with each figure's floor and the published figure it answers, and writing JSON
(``--json``, default ``bench/results/<scenario>.json``); ``report`` renders BENCHMARKS.md from
those JSON files.

This module holds the list of scenarios, their options and the output; it imports nothing
heavy, so ``--help``, ``--list`` and ``report`` start nothing. The scenarios themselves are in
:mod:`scenarios`, built from the scripts beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tables import Row, Run, floor_notes, fmt, met_text, run_table, runs_of

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PROG_ENV = "SANDBUS_BENCH_PROG"
"""How the entry point was called, for its usage lines (``sandbus bench`` sets it)."""
PLOTTED = ("delivery", "sustained")
ANALYSIS = HERE / "analysis.md"
"""Written by hand, not generated: why the targets that are missed are missed (profiles, the
CPU each process spends per claim, the levers tried). BENCHMARKS.md carries it after the
results."""
FLOOR = (
    "the critical path's API writes x the write latency / the concurrency they run at, plus "
    "every one of those writes' share of the development cluster's own CPU (its CPU seconds "
    "per write over sequential writes, measured in the same run: on a 2-core machine the API "
    "stand-in shares the cores with what it serves)"
)


def _ints(parser: argparse.ArgumentParser, name: str, default: list[int], text: str) -> None:
    parser.add_argument(name, type=int, nargs="+", default=default, metavar="N", help=text)


def _delivery(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pool", type=int, default=100, help="warm pool replicas (default 100)")
    parser.add_argument("--claims", type=int, default=100, help="claims a round (default 100)")
    _ints(parser, "--concurrency", [1, 10, 50], "a round at each (default 1 10 50)")


def _batch(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replicas", type=int, default=100, help="BatchSandbox replicas and Pool (default 100)"
    )


def _sustained(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        default=[45.0, 75.0],
        metavar="PER_S",
        help="claims per second, a run of its own each (default 45 75)",
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    parser.add_argument("--pool", type=int, default=150, help="warm pool (default 150)")
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight (64)")
    parser.add_argument("--seed", type=int, default=1, help="of the arrival times (default 1)")


def _burst(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--claims", type=int, default=1000, help="claims at once (default 1000)")
    parser.add_argument("--pool", type=int, default=None, help="warm pool (default claims + 50)")
    parser.add_argument("--concurrency", type=int, default=64, help="creates in flight (64)")


def _fill(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--size", type=int, default=1000, help="pool members and bare Pods (default 1000)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="bare creates in flight (16)")


def _watcher(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--changes", type=int, default=10_000, help="changes (default 10000)")
    parser.add_argument(
        "--objects", type=int, default=200, help="Sandboxes they change (default 200)"
    )


def _recovery(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--objects", type=int, default=10_000, help="Sandboxes in the state table (10000)"
    )
    parser.add_argument(
        "--workers",
        nargs="+",
        choices=("sandbox", "pool", "claim"),
        default=["sandbox", "pool", "claim"],
        help="killed and restarted in turn (default all three)",
    )
    parser.add_argument("--pool", type=int, default=2, help="warm pool for the claim (2)")


def _memory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--objects", type=int, default=10_000, help="Sandboxes (default 10000)")


@dataclass(frozen=True)
class Scenario:
    summary: str
    """One line, for ``--help``."""
    measures: str
    published: str
    target: str
    minutes: str
    """Expected run time at full size, both write latencies."""
    options: Callable[[argparse.ArgumentParser], None]


SCENARIOS: dict[str, Scenario] = {
    "delivery": Scenario(
        "100 Ready warm sandboxes delivered to 100 SandboxClaims at concurrency 1, 10 and 50",
        "A SandboxWarmPool of 100 Ready; then 100 SandboxClaims as that many clients that each "
        "create a claim and wait for it to be Ready, at concurrency 1, 10 and 50 (the pool "
        "refilled to 100 Ready between rounds): first create to last claim Ready, per-claim "
        "p50/p99, launch types (warm/cold).",
        "agent-sandbox: 76.4 s / 23.2 s / 33.9 s at concurrency 1 / 10 / 50",
        "concurrency 50: under 0.5 s, and within 2x its floor at 5 ms per write",
        "~3 min",
        _delivery,
    ),
    "batch": Scenario(
        "one BatchSandbox of 100 replicas from a Pool of 100 Ready (bench/batch_allocation.py)",
        "One BatchSandbox of 100 replicas taken from an OpenSandbox Pool of 100 Ready Pods: "
        "create to allocated, to endpoints written and to status ready.",
        "OpenSandbox: 0.92 s",
        "none set (compared with the published figure)",
        "~2 min",
        _batch,
    ),
    "sustained": Scenario(
        "SandboxClaims arriving at 45/s and at 75/s for 60 s (bench/claim_latency.py sustained)",
        "Claims arriving as a Poisson process at 45/s and at 75/s (a run each) for 60 s against "
        "a warm pool of 150 that replenishes behind them: create to Ready p50/p90/p99/max.",
        "agent-sandbox at 45/s: p50 92 ms, p90 182 ms, p99 376 ms; its KWOK gate at 75/s: "
        "p99 <= 500 ms",
        "45/s: p50 <= 50 ms, p99 <= 200 ms; 75/s: p99 <= 500 ms",
        "~7 min",
        _sustained,
    ),
    "burst": Scenario(
        "1,000 SandboxClaims at once against a pool of 1,050 (bench/claim_latency.py burst)",
        "1,000 claims created at once (64 requests in flight) against a warm pool of 1,050: "
        "create to Ready p50/p90/p99/max, and one-to-one: every claim holds a distinct Sandbox "
        "and no Sandbox is claimed twice.",
        "agent-sandbox: controller p99 851 ms at 3,600 claims (#1454)",
        "p99 < 500 ms, one-to-one intact",
        "~4 min",
        _burst,
    ),
    "fill": Scenario(
        "a SandboxWarmPool of 1,000 filled from 0, beside 1,000 bare Pods (bench/pool_fill.py)",
        "A SandboxWarmPool of 1,000 filled from 0 to every member Ready, beside 1,000 bare Pods "
        "on the same cluster in the same run; the Sandbox creates the pool worker issued.",
        "none (the baseline is 1,000 bare Pods in the same run)",
        "creates issued = 1,000; within 1.5x the bare Pods",
        "~4 min",
        _fill,
    ),
    "watcher": Scenario(
        "the watcher's changes/s over 10,000 changes beside the raw JetStream ceiling "
        "(bench/watcher_throughput.py)",
        "10,000 changes queued while the watcher is frozen, then published by it to the event "
        "log (and the relist path), beside raw JetStream publishes in the same run: one write "
        "per change, 32 in flight, is the watcher's ceiling.",
        "none (the ceiling is measured in the same run)",
        ">= 0.8x the ceiling",
        "~2 min",
        _watcher,
    ),
    "recovery": Scenario(
        "the sandbox, pool and claim workers SIGKILLed with 10,000 objects and restarted: time "
        "until each serves again (bench/worker_restart.py)",
        "With 10,000 Sandboxes in the state table, each worker in turn is SIGKILLed and started "
        "again (same identity, as a restarted container): process start to serving again (the "
        "sandbox worker: a new Sandbox's first reconcile; the pool worker: a new "
        "SandboxWarmPool's first reconcile; the claim worker: a new claim Ready, adopted warm).",
        "none",
        "under 1 s",
        "~4 min",
        _recovery,
    ),
    "memory": Scenario(
        "resident memory of each service with 10,000 Sandboxes, and the total",
        "Resident memory (VmRSS) of the watcher, sandbox, pool, claim and snapshot services "
        "with 10,000 Sandboxes (Suspended, so the cluster's own work stays small) reconciled.",
        "none",
        "total <= 300 MB",
        "~4 min",
        _memory,
    ),
}


def _common_options(parser: argparse.ArgumentParser, *, json_option: bool = True) -> None:
    parser.add_argument(
        "--write-latency-ms",
        type=float,
        nargs="+",
        default=[0.0, 5.0],
        metavar="MS",
        help="run at each of these per-write latencies of the development cluster (default: "
        "0 and 5)",
    )
    parser.add_argument(
        "--pod-ready-delay",
        type=float,
        default=0.2,
        help="seconds until the simulated kubelet readies a started Pod (default 0.2)",
    )
    parser.add_argument(
        "--baseline-rounds",
        type=int,
        default=100,
        help="rounds of 4 sequential writes for the baseline and the cluster's CPU per write "
        "(default 100)",
    )
    parser.add_argument(
        "--limit", type=float, default=900.0, help="seconds before a step gives up (900)"
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    if json_option:
        parser.add_argument(
            "--json",
            type=Path,
            default=None,
            metavar="PATH",
            help="where the results go (default bench/results/<scenario>.json; a PNG of the "
            "latencies beside it for delivery and sustained, when matplotlib is installed)",
        )


def build_parser() -> argparse.ArgumentParser:
    prog = os.environ.get(PROG_ENV) or "python -m bench"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a benchmark scenario on sandbus's embedded default (an embedded "
        "nats-server, `sandbus devcluster` and each service its own process) at each write "
        "latency, print a Markdown table with each figure's floor and the published figure it "
        "answers, and write JSON. Run on purpose, on a machine as quiet as you can make it.",
        epilog=f"`{prog} SCENARIO --help` shows a scenario's options. See bench/README.md.",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the scenarios with what each answers"
    )
    commands = parser.add_subparsers(dest="command", metavar="SCENARIO")
    for name, scenario in SCENARIOS.items():
        sub = commands.add_parser(
            name,
            help=scenario.summary,
            description=f"{scenario.measures} Published: {scenario.published}. Target: "
            f"{scenario.target}. Full size, both latencies: {scenario.minutes}.",
        )
        _common_options(sub)
        scenario.options(sub)
    every = commands.add_parser(
        "all",
        help="every scenario in turn at its full size, then `report`",
        description="Every scenario in turn with its defaults (their JSON in --results), then "
        "BENCHMARKS.md from them.",
    )
    _common_options(every, json_option=False)
    every.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    report = commands.add_parser(
        "report",
        help="render BENCHMARKS.md from the JSON files in bench/results/",
        description="Render BENCHMARKS.md (results, floors, published figures, targets) from "
        "the JSON the scenarios wrote; a scenario without JSON is 'not yet measured'.",
    )
    report.add_argument("--results", type=Path, default=RESULTS, help="the JSON files' folder")
    report.add_argument(
        "--output", type=Path, default=ROOT / "BENCHMARKS.md", help="default BENCHMARKS.md"
    )
    return parser


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parameters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        key: (str(value) if isinstance(value, Path) else value)
        for key, value in vars(args).items()
        if key not in ("command", "list", "json", "no_plot", "results")
    }


def full_size(name: str) -> dict[str, Any]:
    """The parameters of a scenario at its defaults."""
    return parameters(build_parser().parse_args([name]))


def _fix(name: str, args: argparse.Namespace) -> None:
    if name == "burst" and args.pool is None:
        args.pool = args.claims + 50


def run_scenario(name: str, args: argparse.Namespace) -> int:
    import asyncio

    import scenarios

    _fix(name, args)
    scenario = SCENARIOS[name]
    run: Callable[[argparse.Namespace, float], Any] = getattr(scenarios, name)
    runs: list[Run] = []
    path: Path = args.json or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for latency in args.write_latency_ms:
        progress(f"== {name} at {latency:g} ms per write")
        runs.append(asyncio.run(run(args, latency)))
        # Written after each latency: a later one that fails leaves the runs before it.
        document = _document(name, scenario, args, runs)
        path.write_text(json.dumps(document, indent=1) + "\n")
    print(section(name, document, heading="##"))
    print(f"\nJSON: {path}")
    if not args.no_plot and name in PLOTTED:
        picture = path.with_suffix(".png")
        if scenarios.plot(name, document, picture):
            print(f"plot: {picture}")
    return 0


def _document(
    name: str, scenario: Scenario, args: argparse.Namespace, runs: list[Run]
) -> dict[str, Any]:
    from tables import document

    return document(name, scenario.summary, parameters(args), runs)


def _machine_line(machine: Mapping[str, Any]) -> str:
    return (
        f"{machine.get('cpus')} CPUs ({machine.get('cpu')}), {machine.get('memory_gib')} GiB, "
        f"Python {machine.get('python')}, commit {machine.get('commit')}, {machine.get('date')}"
    )


def reduced(name: str, data: Mapping[str, Any]) -> list[str]:
    """The parameters of a run that differ from the scenario's full size (a smoke run)."""
    wanted = full_size(name)
    got = data.get("parameters") or {}
    skip = {"limit", "write_latency_ms", "baseline_rounds", "pod_ready_delay"}
    out = []
    for key, value in wanted.items():
        if key in skip:
            continue
        if name == "burst" and key == "pool" and value is None:
            value = got.get("claims", 1000) + 50
        if key == "rates" and set(value) <= set(got.get(key) or ()):
            continue  # the full-size rates, and more besides (a rate this machine sustains)
        if key in got and got[key] != value:
            out.append(f"{key} {got[key]} (full size: {value})")
    return out


def section(name: str, data: Mapping[str, Any], *, heading: str = "###") -> str:
    """A scenario's results as Markdown: what it is, its table and how the floors are made."""
    scenario = SCENARIOS[name]
    runs = runs_of(data)
    lines = [f"{heading} {name}: {scenario.summary}", "", scenario.measures, ""]
    lines.append(f"Published: {scenario.published}. Target: {scenario.target}.")
    lines.append("")
    lines.append(f"Run: {_machine_line(data.get('machine') or {})}.")
    smaller = reduced(name, data)
    if smaller:
        lines += [
            "",
            f"**A reduced-size (smoke) run, not the scenario's figures:** {'; '.join(smaller)}.",
        ]
    lines += ["", run_table(name, runs)]
    notes = floor_notes(runs)
    if notes:
        lines += ["", "Floors:", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines)


def headline(row: Row) -> bool:
    return bool(row.target or row.published)


def render_report(results: Path) -> str:
    found: dict[str, dict[str, Any]] = {}
    for name in SCENARIOS:
        path = results / f"{name}.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m bench report` (bench/suite.py) from bench/results/*.json; "
        "regenerate it rather than editing it. -->",
        "",
        "Each scenario runs sandbus on its embedded default (an embedded nats-server, `sandbus "
        "devcluster` with its latency model, and each service its own process) at 0 and at 5 ms "
        "per API write; how to run them: [bench/README.md](bench/README.md) (`python -m bench "
        "SCENARIO`, or `sandbus bench SCENARIO`). Beside each result: its **floor**, "
        f"{FLOOR}; and the **published figure** it answers. Figures are from one machine, "
        "shared and noisy: read them against the floor and the baselines of the same run.",
        "",
        "## Results",
        "",
        "| scenario | write latency | figure | result | floor (a rate: ceiling) "
        "| published figure it answers | target | met? |",
        "|---|---:|---|---:|---:|---|---|---|",
    ]
    for name, scenario in SCENARIOS.items():
        data = found.get(name)
        if data is None:
            lines.append(
                f"| {name} | - | {scenario.summary} | not yet measured | - | "
                f"{scenario.published} | {scenario.target} | |"
            )
            continue
        label = f"{name} (smoke run)" if reduced(name, data) else name
        if not any(headline(row) for run in runs_of(data) for row in run.rows):
            lines.append(f"| {label} | - | {scenario.summary} | see below | - | - | - | |")
        for run in runs_of(data):
            for row in run.rows:
                if headline(row):
                    floor = fmt(row.floor, row.unit) if row.floor is not None else "-"
                    lines.append(
                        f"| {label} | {run.write_latency_ms:g} ms | {row.figure} "
                        f"| {fmt(row.value, row.unit)} | {floor} | {row.published or '-'} "
                        f"| {row.target or '-'} | {met_text(row.met)} |"
                    )
    if ANALYSIS.is_file():
        lines += ["", "## Where the time goes", "", ANALYSIS.read_text().strip()]
    lines += ["", "## Runs", "", "| scenario | machine, commit, date |", "|---|---|"]
    for name in SCENARIOS:
        data = found.get(name)
        where = _machine_line(data.get("machine") or {}) if data else "not yet measured"
        lines.append(f"| {name} | {where} |")
    lines += ["", "## Scenarios", ""]
    for name, scenario in SCENARIOS.items():
        data = found.get(name)
        if data is None:
            lines += [
                f"### {name}: {scenario.summary}",
                "",
                scenario.measures,
                "",
                f"Published: {scenario.published}. Target: {scenario.target}.",
                "",
                f"Not yet measured: `python -m bench {name}` ({scenario.minutes}).",
                "",
            ]
        else:
            lines += [section(name, data), ""]
    return "\n".join(lines).rstrip() + "\n"


def report(results: Path, output: Path) -> int:
    output.write_text(render_report(results))
    print(f"wrote {output}")
    return 0


def list_scenarios() -> str:
    width = max(map(len, SCENARIOS))
    lines = [f"{name:<{width}}  {s.summary}" for name, s in SCENARIOS.items()]
    lines.append(f"{'all':<{width}}  every scenario in turn, then report")
    lines.append(f"{'report':<{width}}  render BENCHMARKS.md from bench/results/*.json")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(list_scenarios())
        return 0
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: choose a scenario:\n{list_scenarios()}", file=sys.stderr)
        return 2
    if args.command == "report":
        return report(args.results, args.output)
    if args.command == "all":
        common = ["--write-latency-ms", *map(str, args.write_latency_ms)]
        common += ["--pod-ready-delay", str(args.pod_ready_delay), "--limit", str(args.limit)]
        common += ["--baseline-rounds", str(args.baseline_rounds)]
        if args.no_plot:
            common.append("--no-plot")
        failed = []
        for name in SCENARIOS:
            one = parser.parse_args([name, *common, "--json", str(args.results / f"{name}.json")])
            try:
                run_scenario(name, one)
            except Exception as error:  # the next scenario still runs
                progress(f"{name} failed: {error!r}")
                failed.append(name)
        report(args.results, ROOT / "BENCHMARKS.md")
        if failed:
            progress(f"failed: {', '.join(failed)}")
        return 1 if failed else 0
    return run_scenario(args.command, args)
