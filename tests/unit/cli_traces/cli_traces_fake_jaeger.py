"""A stand-in Jaeger query server that replays recorded api_v3 bodies."""

from __future__ import annotations

import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).parent / "data"


class FakeJaeger:
    """Serves recorded api_v3 bodies by path; records every request it gets."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                parsed = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parsed.query)
                fake.requests.append((parsed.path, query))
                key = parsed.path
                service = query.get("query.serviceName", [""])[0]
                status, body = fake.routes.get(f"{key}?{service}") or fake.routes.get(
                    key, (404, (DATA / "api_v3_not_found.json").read_bytes()))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def serve(self, path: str, file_name: str, status: int = 200) -> None:
        self.routes[path] = (status, (DATA / file_name).read_bytes())
