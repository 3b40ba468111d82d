"""A long-running HTTP service: every GET /gen runs the tiny SD pipeline; GET /patched tells whether
the UNet's forward is patched right now. It starts stepscope's control server (and nothing else)."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

import stepscope
from stepscope.pipelines.sd import build_pipeline

server_on = "--no-stepscope" not in sys.argv
if server_on:
    stepscope.start_server()
pipe = build_pipeline("tiny")
lock = __import__("threading").Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path == "/gen":
            with lock:
                pipe("a cat", num_inference_steps=4, height=64, width=64, generator=torch.Generator().manual_seed(0))
            body = b'{"ok": true}'
        elif self.path == "/patched":
            from stepscope.record.tracing.patch import is_traced

            body = json.dumps({"patched": is_traced(type(pipe.unet).__dict__["forward"])}).encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(httpd.server_address[1], flush=True)
httpd.serve_forever()
