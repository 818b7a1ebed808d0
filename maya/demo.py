"""`maya demo`: the main job on embedded defaults, end to end on real code.

Until the emulator and predictor land, the demo measures the bundled example on this machine's
CPU with torch.profiler, then exercises the trace pipeline: maya_trace_spec run -> validation ->
warehouse catalog -> read-only SQL -> Perfetto timeline.
"""
from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .paths import example_script, runs_dir, warehouse_path
from .sql import run_query

QUERIES = {
    "Top aten ops by inclusive time": """
        SELECT name, count(*) AS calls, round(sum(end_ns - start_ns) / 1e6, 2) AS total_ms,
               any_value(input_shapes) AS example_shapes
        FROM ops WHERE name LIKE 'aten::%' GROUP BY name ORDER BY total_ms DESC LIMIT 8""",
    "Time per phase and iteration": """
        SELECT iteration, phase, count(*) AS ops, round(sum(end_ns - start_ns) / 1e6, 2) AS total_ms
        FROM ops WHERE parent_op_id IS NOT NULL AND iteration IS NOT NULL AND name LIKE 'aten::%'
        GROUP BY ALL ORDER BY iteration, phase""",
    "Warehouse catalog": "SELECT run_id, source, status, ranks, api_calls, ops FROM runs ORDER BY registered_at DESC LIMIT 3",
}


def run_demo(console: Console, out_dir: Path | None = None) -> Path:
    from maya.collectors.profiler.workload import profile_workload
    from maya_trace_spec.interop.perfetto import export_perfetto
    from maya_trace_spec.validation import validate_run

    from .warehouse import register_run

    run_dir = out_dir or runs_dir() / time.strftime("demo-%Y%m%d-%H%M%S")
    script = example_script()
    console.rule("[bold]Maya demo")
    console.print(f"1. profiling the bundled example [cyan]{script.name}[/] on this machine (torch.profiler)")
    with console.status("running the training script..."):
        profile_workload([str(script), "--steps", "3"], run_dir)
    console.print(f"   trace written to [cyan]{run_dir}[/]")
    problems = validate_run(run_dir)
    if problems:
        raise RuntimeError("the demo trace does not validate: " + "; ".join(map(str, problems)))
    console.print("2. validated against maya_trace_spec: [green]no problems[/]")
    run_id = register_run(run_dir)
    console.print(f"3. catalogued as run [cyan]{run_id}[/] in {warehouse_path()}")
    console.print("4. read-only SQL over the run and the warehouse:")
    for title, sql in QUERIES.items():
        result = run_query(sql, trace=run_dir)
        table = Table(*result.columns, title=title, title_justify="left")
        for row in result.rows:
            table.add_row(*(str(v) for v in row))
        console.print(table)
    timeline = run_dir.with_name(run_dir.name + ".perfetto.json")
    stats = export_perfetto(run_dir, timeline)
    console.print(f"5. Perfetto timeline with {stats.slices} slices: [cyan]{timeline}[/] "
                  "(open in https://ui.perfetto.dev)")
    return run_dir
