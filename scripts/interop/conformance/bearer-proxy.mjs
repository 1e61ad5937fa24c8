// bearer-proxy: the conformance suite's client sends no credentials, and
// `toolgate mcp --http` serves only callers with a bearer token. This proxy
// listens on loopback and forwards every request unchanged (method, path,
// headers, Host included, and the body, streamed both ways) to the target,
// adding `Authorization: Bearer $TOKEN`.
//
// Usage: node bearer-proxy.mjs LISTEN_PORT TARGET_HOST:PORT   (TOKEN from the environment)
// Prints "listening PORT" once it accepts connections.
import http from 'node:http';

const [listenPort, target] = process.argv.slice(2);
const token = process.env.TOKEN;
if (!listenPort || !target || !token) {
  console.error('usage: TOKEN=... node bearer-proxy.mjs LISTEN_PORT TARGET_HOST:PORT');
  process.exit(2);
}
const [targetHost, targetPort] = target.split(':');

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const up = http.request(
    { host: targetHost, port: Number(targetPort), method: req.method, path: req.url, headers },
    (upRes) => {
      res.writeHead(upRes.statusCode, upRes.rawHeaders);
      upRes.pipe(res);
    },
  );
  up.on('error', (err) => {
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'text/plain' });
    }
    res.end(`bearer-proxy: ${err.message}`);
  });
  req.pipe(up);
  res.on('close', () => up.destroy());
});
server.listen(Number(listenPort), '127.0.0.1', () => {
  console.log(`listening ${server.address().port}`);
});
