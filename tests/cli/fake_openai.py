#!/usr/bin/env python3
"""A canned OpenAI-style server on 127.0.0.1 for tests/cli/endpoint.sh (a test
fixture, never needed to run dsq). The first path segment picks a behaviour:

  /v1/...     models ["m"]; chat completions answer "The answer is 7."; completions answer " 7\\n#### 7" with usage 10 / 5,
              or HTTP 400 "maximum context length" for a prompt holding LONGQ
              (chat: llama-server's "exceeds the available context size")
  /llama/v1/  as llama-server: echo refused with HTTP 500 "Unsupported param: echo"
  /auth/v1/   HTTP 401 unless Authorization: Bearer sekrit
  /big/v1/models   a 20 MiB answer with Content-Length
  /bigc/v1/models  a 20 MiB answer without it (ends when the connection closes)
  /root/      llama-server's own root endpoints: /models, /completions {"content"}

Usage: fake_openai.py PORTFILE LOGFILE SECONDS. Writes the port to PORTFILE,
one "METHOD PATH" line per request to LOGFILE, and exits after SECONDS."""
import json, sys, threading, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORTFILE, LOGFILE, SECONDS = sys.argv[1], sys.argv[2], float(sys.argv[3])
BIG = 20 << 20


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def send(self, code, obj, length=True):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def handle_any(self, body):
        with open(LOGFILE, "a") as f:
            f.write("%s %s\n" % (self.command, self.path))
        p = self.path
        if p.startswith("/big"):
            pad = b'{"data": [{"id": "m"}], "pad": "' + b"x" * BIG + b'"}'
            return self.send(200, pad, length=p.startswith("/big/"))
        if p.startswith("/auth/") and self.headers.get("Authorization") != "Bearer sekrit":
            return self.send(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
        if p.startswith("/root/"):
            if p.endswith("/models"):
                return self.send(200, {"models": [{"name": "m"}], "object": "list", "data": [{"id": "m"}]})
            return self.send(200, {"content": " 7\n#### 7", "stop": True})
        if p.endswith("/models"):
            return self.send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        if p.endswith("/chat/completions"):
            if b"LONGQ" in body:
                return self.send(400, {"error": {"message": "the request exceeds the available context size, try "
                                                 "increasing it", "type": "exceed_context_size_error", "code": 400}})
            return self.send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is 7."},
                                                "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
        if p.endswith("/completions"):
            req = json.loads(body or b"{}")
            if p.startswith("/llama/") and "echo" in req:
                return self.send(500, {"error": {"code": 500, "message": "Unsupported param: echo", "type": "server_error"}})
            if "LONGQ" in str(req.get("prompt", "")):
                return self.send(400, {"error": {"message": "This model's maximum context length is 64 tokens. However, "
                                                 "you requested 900 tokens.", "type": "BadRequestError", "code": 400}})
            return self.send(200, {"choices": [{"index": 0, "text": " 7\n#### 7", "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
        return self.send(404, {"error": {"message": "no route " + p}})

    def do_GET(self):
        self.handle_any(b"")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.handle_any(self.rfile.read(n))


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
threading.Timer(SECONDS, srv.shutdown).start()
srv.serve_forever()
