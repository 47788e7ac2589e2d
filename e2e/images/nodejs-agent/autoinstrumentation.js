// The file the injector points NODE_OPTIONS at (`--require
// /otel-auto-instrumentation-nodejs/autoinstrumentation.js`). The package's `register` entry
// starts the Node.js SDK with every auto-instrumentation, configured by the OTEL_* variables
// the injector sets (exporter endpoint, service name, resource attributes, sampler,
// propagators); node_modules sits beside this file.
require('@opentelemetry/auto-instrumentations-node/register');
