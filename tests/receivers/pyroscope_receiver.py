"""A Pyroscope ingest API receiver for the tests.

Usage: pyroscope_receiver.py PORT OUTDIR
Serves POST /ingest on 127.0.0.1:PORT: each request's query parameters and
headers go to OUTDIR/N.json and its multipart "profile" field (a pprof
file) to OUTDIR/N.pb.gz. Answers 200.
"""
import email.parser
import email.policy
import json
import os
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, outdir = int(sys.argv[1]), sys.argv[2]
os.makedirs(outdir, exist_ok=True)
count = [0]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        url = urllib.parse.urlparse(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ctype = self.headers.get("Content-Type", "")
        profile = None
        if ctype.startswith("multipart/form-data"):
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
            for part in msg.iter_parts():
                if part.get_param("name", header="content-disposition") == "profile":
                    profile = part.get_payload(decode=True)
        count[0] += 1
        n = count[0]
        meta = {"path": url.path, "query": urllib.parse.parse_qs(url.query),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "profile_bytes": len(profile or b"")}
        with open(os.path.join(outdir, f"{n}.json"), "w") as f:
            json.dump(meta, f)
        if profile is not None:
            with open(os.path.join(outdir, f"{n}.pb.gz"), "wb") as f:
                f.write(profile)
        self.send_response(200 if url.path == "/ingest" and profile else 400)
        self.end_headers()

    def log_message(self, *args):
        pass


print("ready", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
