// A dependency-free Node.js HTTP service that burns CPU: "your own service" for
// benchmarks/any_service.py (it knows nothing of throttle-lab).
//
//   node benchmarks/node_burner.js [PORT]      (0 or nothing: any free port)
//
// Prints "port N" once it listens. GET /burn?ms=N busy-loops until the process has used N ms
// of CPU (process.cpuUsage: a quota's pauses do not count) and answers "burned N ms";
// GET /healthz answers "ok". SIGTERM/SIGINT close it.
"use strict";

const http = require("http");

const MAX_MS = 10000;

function cpuMs() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

function burn(ms) {
  const end = cpuMs() + ms;
  let x = 0;
  while (cpuMs() < end) {
    for (let i = 0; i < 2000; i++) x += i;
  }
  return x;
}

function answer(res, status, text) {
  const body = text + "\n";
  res.writeHead(status, { "content-type": "text/plain", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://localhost");
  if (url.pathname === "/healthz") return answer(res, 200, "ok");
  if (url.pathname !== "/burn") return answer(res, 404, "not found");
  const ms = Number(url.searchParams.get("ms") ?? "5");
  if (!Number.isFinite(ms) || ms < 0 || ms > MAX_MS) {
    return answer(res, 422, `ms must be a number in [0, ${MAX_MS}]`);
  }
  burn(ms);
  answer(res, 200, `burned ${ms} ms`);
});

server.keepAliveTimeout = 60000;
server.listen(Number(process.argv[2] || 0), "127.0.0.1", () => {
  process.stdout.write(`port ${server.address().port}\n`);
});

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
