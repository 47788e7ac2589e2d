#!/usr/bin/env python3
"""The stand-in Operator's manager (e2e/operator/README.md): serves the pod webhook over TLS
and answers every AdmissionReview allowed, with no patch."""
import http.server
import json
import ssl
import sys

PORT = 9443
for arg in sys.argv[1:]:
    if arg.startswith("--webhook-port="):
        PORT = int(arg.split("=", 1)[1])
CERTS = "/certs"


class Reviews(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = json.dumps({
            "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, fmt, *args):
        sys.stdout.write("review: " + (fmt % args) + "\n")
        sys.stdout.flush()


server = http.server.ThreadingHTTPServer(("0.0.0.0", PORT), Reviews)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(CERTS + "/tls.crt", CERTS + "/tls.key")
server.socket = tls.wrap_socket(server.socket, server_side=True)
print(f"serving the pod webhook on :{PORT}", flush=True)
server.serve_forever()
