// The Node.js test app: the `http` module's server on 127.0.0.1:$PORT, answering every
// request with 200 and `nodejs <path>`. It knows nothing of OpenTelemetry: the injector's
// NODE_OPTIONS loads the agent before this file runs.
const http = require('http');

const port = Number(process.env.PORT);
http
  .createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`nodejs ${req.url}`);
  })
  .listen(port, '127.0.0.1', () => console.log(`nodejs app listening on 127.0.0.1:${port}`));
