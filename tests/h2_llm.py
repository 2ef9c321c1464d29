#!/usr/bin/python3
"""h2_llm.py - a small OpenAI-compatible chat-completions server over HTTP/2
and TLS (ALPN "h2" only), for the test that the worker multiplexes its calls
when the server offers HTTP/2.  tests/mock_llm.c (libmicrohttpd) speaks
HTTP/1.1 only.

usage: h2_llm.py --cert PEM --key PEM --stats FILE [--port N] [--latency-ms N]

Every POST gets, after the latency, a chat completion whose content is
{"ok": true}.  Prints "port N" once listening.  FILE is rewritten after
every answer with {"requests", "connections", "max_streams"}: the calls
answered, the TLS connections accepted and the most requests one
connection carried at the same time.
"""
import argparse
import asyncio
import json
import os
import ssl
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

STATS = {"requests": 0, "connections": 0, "max_streams": 0}
STATS_PATH = None


def write_stats():
    tmp = STATS_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(STATS, f)
    os.replace(tmp, STATS_PATH)

ANSWER = {
    "id": "chatcmpl-h2", "object": "chat.completion", "created": 0, "model": "mock-h2",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "{\"ok\": true}"}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
}


class Conn:
    def __init__(self, reader, writer, latency):
        self.reader, self.writer, self.latency = reader, writer, latency
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.open = {}     # stream id -> request path
        self.busy = 0      # requests of this connection being answered

    async def run(self):
        self.h2.initiate_connection()
        self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
        await self.flush()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for ev in self.h2.receive_data(data):
                    self.handle(ev)
                await self.flush()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.writer.close()

    def handle(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            self.open[ev.stream_id] = True
            if ev.stream_ended:
                self.answer(ev.stream_id)
        elif isinstance(ev, h2.events.DataReceived):
            self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            self.answer(ev.stream_id)

    def answer(self, sid):
        self.open.pop(sid, None)
        self.busy += 1
        STATS["max_streams"] = max(STATS["max_streams"], self.busy)
        asyncio.get_running_loop().create_task(self.later(sid))

    async def later(self, sid):
        await asyncio.sleep(self.latency)
        self.busy -= 1
        STATS["requests"] += 1
        self.send(sid, 200, json.dumps(ANSWER).encode())
        await self.flush()
        write_stats()

    def send(self, sid, status, body):
        try:
            self.h2.send_headers(sid, [(":status", str(status)), ("content-type", "application/json"),
                                       ("content-length", str(len(body)))])
            self.h2.send_data(sid, body, end_stream=True)
        except h2.exceptions.ProtocolError:
            pass

    async def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)
            try:
                await self.writer.drain()
            except ConnectionError:
                pass


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--stats", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency-ms", type=int, default=500)
    a = ap.parse_args()
    global STATS_PATH
    STATS_PATH = a.stats
    write_stats()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    ctx.set_alpn_protocols(["h2"])

    async def on_conn(reader, writer):
        STATS["connections"] += 1
        write_stats()
        await Conn(reader, writer, a.latency_ms / 1000.0).run()

    srv = await asyncio.start_server(on_conn, "127.0.0.1", a.port, ssl=ctx)
    print("port %d" % srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
