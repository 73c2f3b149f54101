#!/usr/bin/env python3
"""A minimal AWS Lambda Runtime API (2018-06-01) for running a function's real `bootstrap` binary
locally: it hands out SQS events, collects the responses, and reports cold start, per-event
latency and the batch responses as JSON. Standard library only.

Usage: runtime_api.py --port P --events FILE.jsonl --out RESULT.json [--start-file F] [--park]
Each line of FILE.jsonl is one SQS event (the JSON Lambda would pass). The server exits after the
last response (or an /error), writing RESULT.json; the function's next poll then gets a 503 (and
lambda_runtime exits, panicking on the missing request id). With --park the server writes
RESULT.json and keeps that poll waiting until it is killed, as Lambda keeps an idle instance
waiting: the caller can measure the process as it stands after its last invocation.
"""
import os
import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--start-file", help="file holding the function's start time in ns (written by the caller)")
    ap.add_argument("--timeout-ms", type=int, default=30000)
    ap.add_argument("--park", action="store_true", help="after the last response, keep the next poll waiting until killed")
    args = ap.parse_args()
    with open(args.events) as f:
        events = [line for line in f if line.strip()]
    state = {
        "next": 0,
        "first_next_ns": None,
        "handed": {},
        "results": [],
        "errors": [],
        "lock": threading.Lock(),
        "done": threading.Event(),
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _reply(self, code, body=b"", headers=None):
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if not self.path.endswith("/runtime/invocation/next"):
                return self._reply(404)
            with state["lock"]:
                if state["first_next_ns"] is None:
                    state["first_next_ns"] = time.time_ns()
                i = state["next"]
                state["next"] += 1
            if i >= len(events):
                # No more work: park this request until the server shuts down (with --park, until
                # the server is killed: the function stays as an idle instance would).
                state["done"].wait()
                if args.park:
                    threading.Event().wait()
                return self._reply(503)
            rid = str(uuid.uuid4())
            deadline = int(time.time() * 1000) + args.timeout_ms
            with state["lock"]:
                state["handed"][rid] = (i, time.perf_counter_ns())
            body = events[i].encode()
            self._reply(200, body, {
                "Content-Type": "application/json",
                "Lambda-Runtime-Aws-Request-Id": rid,
                "Lambda-Runtime-Deadline-Ms": str(deadline),
                "Lambda-Runtime-Invoked-Function-Arn": "arn:aws:lambda:us-east-1:123456789012:function:courier-send",
                "Lambda-Runtime-Trace-Id": "Root=1-00000000-000000000000000000000000",
            })

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            parts = self.path.split("/")
            if "invocation" in parts:
                rid = parts[parts.index("invocation") + 1]
                kind = parts[-1]
                now = time.perf_counter_ns()
                with state["lock"]:
                    i, handed = state["handed"].pop(rid, (None, now))
                    entry = {"event": i, "latency_ms": (now - handed) / 1e6}
                    if kind == "response":
                        entry["response"] = json.loads(body or b"null")
                        state["results"].append(entry)
                    else:
                        entry["error"] = body.decode(errors="replace")
                        state["errors"].append(entry)
                    finished = len(state["results"]) + len(state["errors"]) >= len(events)
                self._reply(202, b"{}")
                if finished:
                    state["done"].set()
            elif self.path.endswith("/runtime/init/error"):
                with state["lock"]:
                    state["errors"].append({"init_error": body.decode(errors="replace")})
                self._reply(202, b"{}")
                state["done"].set()
            else:
                self._reply(404)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["done"].wait()
    start_ns = None
    if args.start_file:
        with open(args.start_file) as f:
            start_ns = int(f.read().strip())
    out = {
        "events": len(events),
        "ready_ms": (state["first_next_ns"] - start_ns) / 1e6 if start_ns and state["first_next_ns"] else None,
        "results": sorted(state["results"], key=lambda r: r["event"]),
        "errors": state["errors"],
    }
    with open(args.out + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(args.out + ".tmp", args.out)
    if args.park:
        threading.Event().wait()
    server.shutdown()


if __name__ == "__main__":
    main()
