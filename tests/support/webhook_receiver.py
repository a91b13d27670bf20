"""A webhook receiver process for end-to-end tests, verifying Standard Webhooks signatures
with its own few lines of HMAC (no Nexus code), so the test proves interoperability.

    python -m tests.support.webhook_receiver WHSEC_SECRET      (prints "ready PORT")

    POST /ok       200 when the signature verifies, else 401
    POST /flaky    503 for the first two deliveries of a webhook-id, then as /ok
    POST /down     500, always
    GET  /log      every request received, as JSON (path, id, verified, body, status)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOLERANCE_SECONDS = 300


def verified(secret: str, headers: Any, body: bytes) -> bool:
    msg_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signature = headers.get("webhook-signature") or ""
    if not msg_id or not stamp or not stamp.isdigit():
        return False
    if abs(time.time() - int(stamp)) > TOLERANCE_SECONDS:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(
        hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    ).decode()
    return any(
        entry.startswith("v1,") and hmac.compare_digest(entry[3:], expected)
        for entry in signature.split()
    )


def serve(secret: str) -> None:
    log: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                data = json.dumps(log).encode()
            self._answer(200, data)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            ok = verified(secret, self.headers, body)
            msg_id = self.headers.get("webhook-id") or ""
            with lock:
                seen[msg_id] = seen.get(msg_id, 0) + 1
                count = seen[msg_id]
            if self.path == "/down":
                status = 500
            elif self.path == "/flaky" and count <= 2:
                status = 503
            else:
                status = 200 if ok else 401
            with lock:
                log.append(
                    {
                        "path": self.path,
                        "id": msg_id,
                        "verified": ok,
                        "content_type": self.headers.get("content-type"),
                        "body": json.loads(body or b"null"),
                        "status": status,
                        "at": time.time(),
                    }
                )
            self._answer(status, b"{}")

        def _answer(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"ready {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1])
