"""`maya dashboard`: serve the estimator-accuracy dashboard (built by the pipelines) on local HTTP."""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated

import typer

from .common import fail, out
from .estimators import WarehouseOption


def dashboard_cmd(port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8050,
                  open_browser: Annotated[bool, typer.Option("--open", help="Open it in the default "
                                                                            "browser.")] = False,
                  warehouse: WarehouseOption = None):
    """Serve the accuracy dashboard (predicted vs measured, error per kernel family and per estimator
    version) on http://127.0.0.1:PORT/, building it from the warehouse first if it is missing."""
    from maya.pipelines.dashboard import NoAccuracyData, build, dashboard_path

    from maya.core.paths import warehouse_path

    warehouse = warehouse or warehouse_path()
    page = dashboard_path(warehouse)
    if not page.is_file():
        try:
            page, _ = build(warehouse)
        except NoAccuracyData as e:
            fail(str(e))
        out.print(f"built {page}")
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
