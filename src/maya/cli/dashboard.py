"""`maya dashboard`: build the accuracy dashboard (evaluating the latest estimator version and running a small
validation suite first when the warehouse lacks them) and serve it on local HTTP."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated

import typer

from .common import WAREHOUSE, fail, out, row_progress


def dashboard_cmd(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8050,
    open_browser: Annotated[bool, typer.Option("--open", help="Open it in the default browser.")] = False,
    suite: Annotated[
        str,
        typer.Option(
            help="Validation suite run for the latest estimator version when the warehouse has none of it yet "
            "(a `maya validate` suite; 'none': no suite)."
        ),
    ] = "llm-foundry-smoke",
    warehouse: WAREHOUSE = None,
):
    """Serve the accuracy dashboard on http://127.0.0.1:PORT/.

    End to end: predicted vs measured per validation suite and estimator version, with bands; kernels:
    error per family and version. What it shows is built first when missing: the latest estimator version
    evaluated on NeuSight's held-out kernels and a small validation suite (a few minutes on two cores the
    first time, then seconds).
    """
    from maya.core.paths import warehouse_path
    from maya.pipelines.dashboard import NoAccuracyData, build
    from maya.pipelines.dashboard_inputs import NothingToShow, prepare
    from maya.validation import SuiteError

    warehouse = warehouse or warehouse_path()
    progress = row_progress()
    state: dict = {}

    def on_start(total: int, done: int) -> None:
        state["task"] = progress.add_task("suite rows", total=total, last=f"{done} already stored" if done else "")

    def on_row(result) -> None:
        figure = f"{result.error_pct:+.1f}%" if result.error_pct is not None else result.status
        progress.update(state["task"], advance=1, last=f"row {result.key.row} ({result.key.label}): {figure}")

    try:
        with progress:
            prepare(
                warehouse,
                suite=None if suite == "none" else suite,
                on_step=progress.console.print,
                on_start=on_start,
                on_row=on_row,
            )
        page, changed = build(warehouse)
    except (NothingToShow, NoAccuracyData, SuiteError) as e:
        fail(str(e))
    out.print(f"{'built' if changed else 'up to date:'} {page}")
    try:
        server = dashboard_server(page, port)
    except OSError as e:
        fail(f"cannot listen on 127.0.0.1:{port}: {e.strerror} (choose another --port)")
    url = f"http://127.0.0.1:{server.server_port}/"
    out.print(f"serving {page} at {url} (Ctrl-C to stop)")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def dashboard_server(page: Path, port: int) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 answering `/` with the page, read per request (a rebuilt dashboard
    shows on reload)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/", "/index.html", f"/{page.name}"):
                self.send_error(404)
                return
            body = page.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # quiet: one line per request is noise here
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)
