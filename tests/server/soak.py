#!/usr/bin/env python3
"""The server under load, faults and hostile clients (issue: a server that holds).

    soak.py GRAFT_BINARY MODEL_DIR ADAPTER_DIR [--scale 1.0]

Starts `graft serve` on the demo model with an adapter and proves, phase by phase, printing one
line of figures each:
  reference  every distinct request of the mix answered alone (greedy chat, completions, decisions)
  mixed      1,000 requests at 100 keep-alive connections: 0 failed, 0 unequal to the reference
  streams    2,000 concurrent SSE streams held open, /health answering in <= 50 ms throughout;
             then all hung up, and the engine empty again within seconds
  slow       1,000 slow-header and 200 slow-body connections (a byte a second): /health and a
             chat request still answer; each slow one gets 408 at its total deadline
  limits     chunked body over --max-body-bytes (413), too many / too large header fields (431),
             malformed HTTP (400), pipelined requests answered in order, Expect: 100-continue,
             wrong method (405), foreign Host (403), non-JSON body (415), unknown route (404)
  cancel     a non-streamed chat and a long decision whose clients hang up stop within a second
  burst      32 concurrent bodies of 1 MB: peak memory a small multiple of the body each
  rss        the server's RSS after the suite within 20% of after the warm-up
  shutdown   SIGTERM with open streams: each ends with an error event and [DONE]; a client
             trickling a byte does not hold the exit; exit 0
Exit status 0 when every check holds; each failure is printed.
Only the standard library: asyncio raw sockets, so hostile clients are possible.
"""
import asyncio
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print(f"  FAIL: {what}", flush=True)
    return ok


class Server:
    def __init__(self, graft, model, adapter, extra):
        self.log = tempfile.NamedTemporaryFile(prefix="graft-soak-", suffix=".log", delete=False)
        args = [graft, "serve", "--model", model, "--adapter", f"fine={adapter}", "--port", "0",
                "--threads", "1", "--max-queue", "8192", "--kv-tokens", "65536", "--max-running", "64",
                "--max-body-bytes", str(1 << 20), "--header-timeout", "4", "--body-timeout", "4",
                "--shutdown-timeout", "2", "--max-connections", "8192"] + extra
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        for _ in range(600):
            text = open(self.log.name, errors="replace").read()
            m = re.search(r"serving .* on http://[^:]+:(\d+)/v1", text)
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise SystemExit(f"graft serve exited {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        if not self.port:
            raise SystemExit("graft serve did not start in 60 s")

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0


async def read_response(reader):
    """One HTTP/1.1 response: (status, headers dict lower-case, body bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if status == 100:
        return status, headers, b""
    body = b""
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return status, headers, body


def request_bytes(method, path, body=None, headers=None, port=0):
    h = {"Host": f"127.0.0.1:{port}"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    out = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return out.encode() + (body or b"")


async def call(port, method, path, obj=None, timeout=120):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        body = json.dumps(obj).encode() if obj is not None else None
        writer.write(request_bytes(method, path, body, port=port))
        await writer.drain()
        return await asyncio.wait_for(read_response(reader), timeout)
    finally:
        writer.close()


async def health_ms(port):
    t = time.monotonic()
    status, _, _ = await call(port, "GET", "/health", timeout=10)
    return status, (time.monotonic() - t) * 1e3


RECORD = ("10.0.0.{i} - - [04/Dec/2026:10:{i:02d}:00] \"GET /index.php?id={i}' OR 1=1 HTTP/1.1\" 200 512 "
          "\"-\" \"curl/8.0\"\n")


def mix():
    """The distinct requests of the mix: (path, body, what to compare)."""
    out = []
    topics = ["logs", "disks", "mail", "printers", "kernels", "shells", "editors", "backups", "networks", "clocks",
              "fonts", "locales", "packages", "compilers", "daemons", "cron", "sockets", "pipes", "terminals", "users"]
    for t in topics:
        out.append(("/v1/chat/completions", {"model": "base", "messages": [{"role": "user", "content": f"Tell me about {t}."}],
                                             "max_tokens": 8, "temperature": 0,
                                             "chat_template_kwargs": {"enable_thinking": False}}))
    for t in topics[:10]:
        out.append(("/v1/completions", {"model": "fine", "prompt": f"The {t} of a server", "max_tokens": 8, "temperature": 0}))
    for i in range(10):
        record = "".join(RECORD.format(i=i * 7 + j) for j in range(1 + i % 3))
        out.append(("/v1/decisions", {"model": "fine", "record": record,
                                      "questions": [{"id": "m", "question": "Malicious?", "choices": ["yes", "no"]},
                                                    {"id": "c", "question": "Category?", "choices": ["sqli", "xss", "none"]}]}))
    return out


def answer_of(path, body):
    j = json.loads(body)
    if path == "/v1/chat/completions":
        return j["choices"][0]["message"].get("content")
    if path == "/v1/completions":
        return j["choices"][0]["text"]
    return [(d["id"], d["choice"], d["probabilities"], d["logprobs"]) for d in j["decisions"]]


async def phase_reference(port, reqs):
    ref = []
    for path, body in reqs:
        status, _, b = await call(port, "POST", path, body)
        check(status == 200, f"reference {path} answered {status}: {b[:200]!r}")
        ref.append(answer_of(path, b) if status == 200 else None)
    return ref


async def phase_mixed(port, reqs, ref, total, conns):
    counter = iter(range(total))
    failed, unequal = [], []

    async def worker():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for n in counter:
                path, body = reqs[n % len(reqs)]
                writer.write(request_bytes("POST", path, json.dumps(body).encode(), port=port))
                await writer.drain()
                status, headers, b = await asyncio.wait_for(read_response(reader), 300)
                if status != 200:
                    failed.append(f"{path} {status} {b[:120]!r}")
                elif answer_of(path, b) != ref[n % len(reqs)]:
                    unequal.append(f"{path} #{n % len(reqs)}")
                if headers.get("connection") == "close":
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            writer.close()

    t = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(conns)))
    secs = time.monotonic() - t
    print(f"mixed: {total} requests at {conns} connections in {secs:.1f} s: {len(failed)} failed, {len(unequal)} unequal",
          flush=True)
    check(not failed, f"mixed: failed {failed[:5]}")
    check(not unequal, f"mixed: unequal {unequal[:5]}")


async def engine_idle(port, within_s):
    """Seconds until /health shows nothing running or waiting (None: not within within_s)."""
    t = time.monotonic()
    while time.monotonic() - t < within_s:
        _, _, b = await call(port, "GET", "/health", timeout=10)
        j = json.loads(b)
        if j["running"] == 0 and j["waiting"] == 0:
            return time.monotonic() - t
        await asyncio.sleep(0.05)
    return None


async def phase_streams(port, n):
    body = json.dumps({"model": "base", "messages": [{"role": "user", "content": "Write a long story."}],
                       "max_tokens": 4000, "temperature": 0, "stream": True,
                       "chat_template_kwargs": {"enable_thinking": False}}).encode()
    conns = []

    async def open_one():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes("POST", "/v1/chat/completions", body, port=port))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        first = await asyncio.wait_for(reader.readuntil(b"\n\n"), 60)  # the role chunk
        conns.append((reader, writer))
        return head.startswith(b"HTTP/1.1 200") and b"assistant" in first

    t = time.monotonic()
    results = []
    for i in range(0, n, 250):  # opened in waves, as clients arrive
        results += await asyncio.gather(*(open_one() for _ in range(min(250, n - i))), return_exceptions=True)
    opened = sum(1 for r in results if r is True)
    lat = []
    for _ in range(40):
        status, ms = await health_ms(port)
        lat.append(ms if status == 200 else 1e9)
        await asyncio.sleep(0.05)
    # The streams are still open (none was sent its end: 4000 tokens each).
    still = sum(1 for r, w in conns if not r.at_eof())
    for r, w in conns:
        w.transport.abort()
    idle = await engine_idle(port, 30)
    lat.sort()
    print(f"streams: {opened} of {n} opened in {time.monotonic() - t:.1f} s, {still} still open while /health was asked; "
          f"/health median {lat[len(lat) // 2]:.1f} ms, max {lat[-1]:.1f} ms; engine idle {idle if idle is None else round(idle, 2)} s "
          f"after the hang-ups", flush=True)
    check(opened == n, f"streams: only {opened} of {n} opened: {[r for r in results if r is not True][:3]}")
    check(still == n, f"streams: {n - still} closed early")
    check(lat[-1] <= 50, f"streams: /health took {lat[-1]:.1f} ms (limit 50)")
    check(idle is not None and idle <= 10, "streams: the engine did not empty within 10 s of the hang-ups")


async def phase_slow(port, reqs, ref, n_head, n_body, timeout_s):
    async def slow(head_only):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t = time.monotonic()
        try:
            if head_only:
                writer.write(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
                drip = b"X-Slow: " + b"a" * 10000
            else:
                writer.write(request_bytes("POST", "/v1/chat/completions", None, port=port).replace(
                    b"\r\n\r\n", b"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"))
                drip = b" " * 100000
            for b in drip:
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(1.0)
                if reader.at_eof() or len(reader._buffer) > 0:
                    break
            status, _, _ = await asyncio.wait_for(read_response(reader), 30)
            return status, time.monotonic() - t
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            return f"{type(e).__name__}", time.monotonic() - t
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(slow(True)) for _ in range(n_head)] + [asyncio.ensure_future(slow(False)) for _ in range(n_body)]
    await asyncio.sleep(1.5)
    lat = []
    for _ in range(10):
        status, ms = await health_ms(port)
        lat.append(ms if status == 200 else 1e9)
        await asyncio.sleep(0.1)
    path, body = reqs[0]
    t = time.monotonic()
    status, _, b = await call(port, "POST", path, body, timeout=60)
    chat_s = time.monotonic() - t
    chat_ok = status == 200 and answer_of(path, b) == ref[0]
    results = await asyncio.gather(*tasks)
    got408 = sum(1 for s, _ in results if s == 408)
    late = max(secs for _, secs in results)
    print(f"slow: {n_head} slow-header + {n_body} slow-body connections; /health max {max(lat):.1f} ms, a chat "
          f"{'equal' if chat_ok else 'NOT equal'} in {chat_s:.2f} s; {got408} answered 408, the last after {late:.1f} s "
          f"(total deadline {timeout_s} s)", flush=True)
    check(max(lat) <= 50, f"slow: /health took {max(lat):.1f} ms")
    check(chat_ok, f"slow: the chat request answered {status}")
    check(got408 == n_head + n_body, f"slow: {n_head + n_body - got408} did not get 408: "
                                     f"{[s for s, _ in results if s != 408][:5]}")
    check(late <= timeout_s + 3, f"slow: a slow client held its connection {late:.1f} s")


async def raw(port, data, read_all=False, timeout=20):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if read_all:
            out = []
            while True:
                try:
                    out.append(await asyncio.wait_for(read_response(reader), timeout))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
            return out
        return await asyncio.wait_for(read_response(reader), timeout)
    finally:
        writer.close()


async def phase_limits(port):
    host = f"Host: 127.0.0.1:{port}\r\n"
    # A chunked body past --max-body-bytes (1 MiB): 413, without reading it all.
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    data = (f"POST /v1/chat/completions HTTP/1.1\r\n{host}Content-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode() + chunk * 40 + b"0\r\n\r\n"
    try:
        status, _, b = await raw(port, data)
    except (ConnectionError, asyncio.IncompleteReadError) as e:
        status, b = repr(e), b""
    check(status == 413, f"limits: a 2.5 MiB chunked body answered {status}")
    many = "".join(f"X-H{i}: v\r\n" for i in range(300))
    status, _, b = await raw(port, f"GET /health HTTP/1.1\r\n{host}{many}\r\n".encode())
    check(status == 431 and b"301 header fields" in b, f"limits: 300 header fields answered {status} {b[:120]!r}")
    status, _, b = await raw(port, f"GET /health HTTP/1.1\r\n{host}X-Big: {'a' * 100000}\r\n\r\n".encode())
    check(status == 431, f"limits: a 100 KB header answered {status}")
    status, _, b = await raw(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n")
    check(status == 400, f"limits: malformed HTTP answered {status}")
    # Pipelining: three requests in one write, three answers in order.
    tok = json.dumps({"model": "base", "prompt": "hello"}).encode()
    three = (request_bytes("GET", "/version", port=port) + request_bytes("POST", "/tokenize", tok, port=port) +
             request_bytes("GET", "/health", port=port, headers={"Connection": "close"}))
    out = await raw(port, three, read_all=True)
    kinds = [("version" in json.loads(b)) if i == 0 else ("tokens" in json.loads(b)) if i == 1 else ("status" in json.loads(b))
             for i, (s, h, b) in enumerate(out)]
    check(len(out) == 3 and all(s == 200 for s, _, _ in out) and all(kinds), f"limits: pipelined answers {[(s, b[:40]) for s, _, b in out]}")
    # Expect: 100-continue is answered before the body is sent.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /tokenize HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: {len(tok)}\r\n"
                 "Expect: 100-continue\r\n\r\n".encode())
    await writer.drain()
    s1, _, _ = await asyncio.wait_for(read_response(reader), 10)
    writer.write(tok)
    s2, _, _ = await asyncio.wait_for(read_response(reader), 10)
    writer.close()
    check((s1, s2) == (100, 200), f"limits: Expect: 100-continue answered {s1}, then {s2}")
    status, h, _ = await raw(port, request_bytes("DELETE", "/v1/chat/completions", port=port))
    check(status == 405 and h.get("allow") == "POST", f"limits: a wrong method answered {status} {h.get('allow')}")
    status, _, _ = await raw(port, request_bytes("GET", "/health", port=port, headers={"Host": "evil.example"}))
    check(status == 403, f"limits: a foreign Host answered {status}")
    status, _, _ = await raw(port, request_bytes("POST", "/v1/chat/completions", b"{}", port=port,
                                                 headers={"Content-Type": "text/plain"}))
    check(status == 415, f"limits: a text/plain body answered {status}")
    status, _, b = await raw(port, request_bytes("GET", "/nope", port=port))
    check(status == 404 and json.loads(b)["error"]["code"] == 404, f"limits: an unknown route answered {status}")
    print("limits: chunked 413, 431 x2, 400, pipelining, 100-continue, 405, 403, 415, 404 checked", flush=True)


async def phase_cancel(port, reqs, ref):
    # A non-streamed chat that would run 4,000 tokens: the client goes after 0.5 s.
    body = json.dumps({"model": "base", "messages": [{"role": "user", "content": "Write a long story."}],
                       "max_tokens": 4000, "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes("POST", "/v1/chat/completions", body, port=port))
    await writer.drain()
    await asyncio.sleep(0.5)
    writer.transport.abort()
    chat_idle = await engine_idle(port, 10)
    check(chat_idle is not None and chat_idle <= 1.0, f"cancel: a hung-up chat still ran {chat_idle} s later")
    # A decision on a long record (several seconds alone): the client goes after 1 s; a chat
    # request after it is answered at once, not when the decision would have ended.
    record = "".join(RECORD.format(i=i % 60) for i in range(160))
    body = json.dumps({"model": "fine", "record": record,
                       "questions": [{"id": "m", "question": "Malicious?", "choices": ["yes", "no"]}]}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes("POST", "/v1/decisions", body, port=port))
    await writer.drain()
    await asyncio.sleep(1.0)
    writer.transport.abort()
    await asyncio.sleep(0.05)
    path, small = reqs[0]
    t = time.monotonic()
    status, _, b = await call(port, "POST", path, small, timeout=60)
    after = time.monotonic() - t
    check(status == 200 and answer_of(path, b) == ref[0], f"cancel: the chat after the decision answered {status}")
    check(after <= 1.5, f"cancel: the chat after a hung-up decision took {after:.2f} s")
    _, _, m = await call(port, "GET", "/metrics")
    m = m.decode()
    gone = re.findall(r'graft_requests_total\{[^}]*status="499"[^}]*\} (\d+)', m)
    print(f"cancel: a hung-up chat stopped {chat_idle if chat_idle is None else round(chat_idle, 2)} s after, a chat after "
          f"a hung-up decision answered in {after:.2f} s; 499s counted: {sum(int(g) for g in gone)}", flush=True)
    check(sum(int(g) for g in gone) >= 2, "cancel: the hang-ups are not counted as 499 in /metrics")


async def phase_burst(server, n):
    """n concurrent bodies near --max-body-bytes (1 MiB): refused or answered, and the memory
    they took goes back (the RSS check after the suite)."""
    body = {"model": "base", "messages": [{"role": "user", "content": "log line alpha beta " * 50000}], "max_tokens": 2}
    peak, stop = 0.0, False

    async def watch():
        nonlocal peak
        while not stop:
            peak = max(peak, server.rss_mb())
            await asyncio.sleep(0.02)

    before = server.rss_mb()
    w = asyncio.ensure_future(watch())
    res = await asyncio.gather(*(call(server.port, "POST", "/v1/chat/completions", body, timeout=300) for _ in range(n)))
    stop = True
    await w
    statuses = sorted(set(r[0] for r in res))
    print(f"burst: {n} concurrent 1 MB bodies answered {statuses}; RSS {before:.1f} -> peak {peak:.1f} MB "
          f"({(peak - before) / n:.1f} MB a request)", flush=True)
    check(all(s in (200, 400) for s in statuses), f"burst: statuses {statuses}")
    check((peak - before) / n <= 8, f"burst: {(peak - before) / n:.1f} MB a 1 MB request")


async def phase_shutdown(server):
    port = server.port
    body = json.dumps({"model": "base", "messages": [{"role": "user", "content": "Write a long story."}],
                       "max_tokens": 4000, "temperature": 0, "stream": True,
                       "chat_template_kwargs": {"enable_thinking": False}}).encode()
    streams = []
    for _ in range(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes("POST", "/v1/chat/completions", body, port=port))
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"\n\n"), 30)
        streams.append((reader, writer))
    # A client trickling a request head, a byte every half second.
    _, trickle = await asyncio.open_connection("127.0.0.1", port)
    trickle.write(b"GET /health HTTP/1.1\r\n")
    t = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    ended = 0
    for reader, writer in streams:
        try:
            rest = await asyncio.wait_for(reader.read(), 20)
            if b'"error"' in rest and rest.rstrip().endswith(b"0") and b"data: [DONE]" in rest:
                ended += 1
        except (asyncio.TimeoutError, ConnectionError):
            pass
    for _ in range(40):
        if server.proc.poll() is not None:
            break
        trickle.write(b"X")
        await asyncio.sleep(0.5)
    rc = server.proc.wait(timeout=30)
    secs = time.monotonic() - t
    print(f"shutdown: {ended} of 5 streams ended with an error event and [DONE]; exit {rc} after {secs:.1f} s "
          f"(--shutdown-timeout 2) with a client trickling bytes", flush=True)
    check(ended == 5, f"shutdown: {5 - ended} streams ended without an error event and [DONE]")
    check(rc == 0, f"shutdown: exit {rc}")
    check(secs <= 10, f"shutdown took {secs:.1f} s")


async def main():
    graft, model, adapter = sys.argv[1:4]
    scale = float(sys.argv[sys.argv.index("--scale") + 1]) if "--scale" in sys.argv else 1.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = Server(graft, model, adapter, [])
    port = server.port
    try:
        reqs = mix()
        t = time.monotonic()
        ref = await phase_reference(port, reqs)
        print(f"reference: {len(reqs)} distinct requests alone in {time.monotonic() - t:.1f} s", flush=True)
        rss0 = server.rss_mb()
        await phase_mixed(port, reqs, ref, int(1000 * scale), 100)
        await phase_streams(port, int(2000 * scale))
        await phase_slow(port, reqs, ref, int(1000 * scale), int(200 * scale), 4)
        await phase_limits(port)
        await phase_cancel(port, reqs, ref)
        await phase_burst(server, 32)
        await asyncio.sleep(1)
        rss1 = server.rss_mb()
        print(f"rss: {rss0:.1f} MB after the warm-up, {rss1:.1f} MB after the suite ({(rss1 / rss0 - 1) * 100:+.1f}%)", flush=True)
        check(rss1 <= rss0 * 1.2, f"rss grew from {rss0:.1f} to {rss1:.1f} MB")
        await phase_shutdown(server)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        if FAILURES:
            print("--- server log (tail) ---")
            print("".join(open(server.log.name, errors="replace").readlines()[-40:]))
        os.unlink(server.log.name)
    print("soak: clean" if not FAILURES else f"soak: {len(FAILURES)} failures", flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
