"""The SDK-only test app: no agent, only the OpenTelemetry SDK (from /app/lib) configured by
the environment the injector sets (`inject-sdk`): OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
and OTEL_EXPORTER_OTLP_ENDPOINT are read by the SDK itself, nothing is set in code. The
standard library's HTTP server on 127.0.0.1:$PORT answers every request with 200 and
`python-sdk <path>` inside a SERVER span, exported at once."""

import os
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("e2e.python-sdk")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        with tracer.start_as_current_span(f"GET {self.path}", kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("http.request.method", "GET")
            span.set_attribute("url.path", self.path)
            body = f"python-sdk {self.path}".encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            span.set_attribute("http.response.status_code", 200)


if __name__ == "__main__":
    port = int(os.environ["PORT"])
    print(f"python-sdk app listening on 127.0.0.1:{port}", flush=True)
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
