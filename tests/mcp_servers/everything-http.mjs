// server-everything's Streamable HTTP transport, bound to 127.0.0.1 only (on its own it listens on every
// interface): the tests start it with PORT set, on the loopback interface alone.
import http from "node:http";

const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, ...rest) {
  const callback = rest.find((argument) => typeof argument === "function");
  return listen.call(this, port, "127.0.0.1", callback);
};
await import("./node_modules/@modelcontextprotocol/server-everything/dist/transports/streamableHttp.js");
