"""The Python test app: Flask (from /app/lib, on PYTHONPATH) on 127.0.0.1:$PORT, answering
every request with 200 and `python <path>`. It knows nothing of OpenTelemetry: the injector's
PYTHONPATH makes the agent's sitecustomize instrument Flask before this file runs."""

import os

from flask import Flask, request

app = Flask(__name__)


@app.route("/", defaults={"path": ""})
@app.route("/<path:path>")
def answer(path):
    return f"python {request.path}"


if __name__ == "__main__":
    port = int(os.environ["PORT"])
    print(f"python app listening on 127.0.0.1:{port}", flush=True)
    app.run(host="127.0.0.1", port=port)
