"""`make deploy-test`: build the images, run the compose stack on this machine, and check it.

Steps (each prints one line, with its time):
  1. Docker: installs Debian's docker.io (and docker-compose) when absent, and starts dockerd
     when none answers (no bridge, no iptables: every container uses the host network).
  2. Images: deploy/base-image.sh (debootstrap) and the Dockerfile's builder, router and engine
     stages (`docker build --network host`), i.e. `make deploy-images`.
  3. The stack up (deploy/compose.yaml) on free loopback ports, until HAProxy and both router
     replicas are ready.
  4. A chat completion under `pd` through HAProxy: 200, and the route header names the prefill
     engine and the decode engine, each the container listening on that engine's port.
  5. Two routers: HAProxy takes turns between the replicas (its X-Switchyard-Replica header),
     each serves `pd` directly too; one replica killed, HAProxy sends everything to the other
     without a failed request; restarted, it is back in the rotation.
  6. Policy switch at run time to `long_prompts_pd` (from deploy/policies/, mounted) on every
     replica, and back.
  7. Prometheus from Debian's package scrapes both routers (skip: DEPLOY_TEST_PROMETHEUS=0).
  8. Kill the decode container: pd degrades onto the prefill engine; kill the prefill one too:
     an OpenAI error body; start both again: `pd` again.
  9. Tear down the stack (containers, volumes) and stop the dockerd this script started.
Only the standard library: it runs with the system python3 before any venv exists.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
PROJECT = "switchyard-deploy-test"
_T0 = time.monotonic()


def step(message: str) -> None:
    print(f"[deploy-test {time.monotonic() - _T0:7.1f} s] {message}", flush=True)


def run(*argv: str, check: bool = True, quiet: bool = False, **kw: Any) -> subprocess.CompletedProcess[str]:
    if not quiet:
        step("$ " + " ".join(argv))
    return subprocess.run(argv, check=check, text=True, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- 1. docker ----

def apt_install(*packages: str) -> None:
    run("apt-get", "update", "-q")
    run("apt-get", "install", "-y", "-q", "--no-install-recommends", *packages,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def docker_answers() -> bool:
    return run("docker", "info", check=False, quiet=True, capture_output=True).returncode == 0


@contextlib.contextmanager
def docker_daemon() -> Iterator[None]:
    """A dockerd to talk to: the running one, or one started here (and stopped at the end)."""
    missing = [p for p, exe in (("docker.io", "dockerd"), ("docker.io", "docker"))
               if shutil.which(exe) is None]
    if missing:
        apt_install("docker.io")
    if docker_answers():
        yield
        return
    log = open(os.path.join(tempfile.gettempdir(), "switchyard-dockerd.log"), "wb")
    step("starting dockerd (host networking only: --bridge=none --iptables=false)")
    daemon = subprocess.Popen(["dockerd", "--bridge=none", "--iptables=false",
                               "--ip6tables=false"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not docker_answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"dockerd did not start; see {log.name}")
            time.sleep(0.5)
        yield
    finally:
        step("stopping the dockerd this test started")
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()


def compose_command() -> list[str]:
    if run("docker", "compose", "version", check=False, quiet=True,
           capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is None:
        apt_install("docker-compose")
    return ["docker-compose"]


# ---- HTTP ----

def http(method: str, url: str, body: dict[str, Any] | None = None,
         timeout_s: float = 300) -> tuple[int, dict[str, str], Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            status, headers, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, headers, raw = err.code, err.headers, err.read()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = raw.decode(errors="replace")
    # Header names are case-insensitive (the router's Rust front sends them lower-case).
    return status, {k.lower(): v for k, v in headers.items()}, payload


def wait_for(what: str, check: Any, timeout_s: float, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
        except (OSError, urllib.error.URLError, ValueError):
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def chat(base: str, text: str, max_tokens: int = 8) -> tuple[int, dict[str, str], Any]:
    return http("POST", f"{base}/v1/chat/completions",
                {"model": "default", "max_tokens": max_tokens, "temperature": 0,
                 "messages": [{"role": "user", "content": text}]})


# ---- the checks ----

REPLICAS = ("router-0", "router-1")  # compose services; HAProxy names its servers the same


class Stack:
    def __init__(self, compose: list[str], ports: dict[str, int]) -> None:
        self.compose = [*compose, "-p", PROJECT, "-f", os.path.join(DEPLOY, "compose.yaml")]
        self.ports = ports
        self.env = {**os.environ, **{k: str(v) for k, v in ports.items()}}
        # Clients go through HAProxy; the admin API and checks per replica go to each directly.
        self.base = f"http://127.0.0.1:{ports['SWITCHYARD_ROUTER_PORT']}"
        self.replicas = {name: f"http://127.0.0.1:{ports[f'SWITCHYARD_ROUTER_{i}_PORT']}"
                         for i, name in enumerate(REPLICAS)}

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(*self.compose, *args, check=check, env=self.env)

    def engines(self, base: str | None = None) -> dict[str, dict[str, Any]]:
        url = f"{base or self.replicas[REPLICAS[0]]}/admin/engines"
        return {e["id"]: e for e in http("GET", url)[2]["engines"]}

    def container_on(self, address: str) -> str:
        """The compose container whose engine listens on `address` (its --port argument)."""
        port = address.rsplit(":", 1)[1]
        for name in ("switchyard-engine-prefill", "switchyard-engine-decode"):
            args = json.loads(run("docker", "inspect", "--format", "{{json .Args}}", name,
                                  quiet=True, capture_output=True).stdout)
            if args[args.index("--port") + 1] == port:
                return name
        raise SystemExit(f"no engine container listens on {address}")

    def ready(self) -> bool:
        """HAProxy and every replica answer /ready with both engines healthy."""
        for base in (self.base, *self.replicas.values()):
            status, _, body = http("GET", f"{base}/ready", timeout_s=5)
            if not (status == 200 and body["healthy_engines"] == 2):
                return False
        return True

    def all_replicas(self, check: Any) -> bool:
        return all(check(base) for base in self.replicas.values())


def check_pd(stack: Stack) -> None:
    status, headers, body = chat(stack.base, "Name three primary colors.")
    assert status == 200, (status, body)
    route = headers["x-switchyard-route"]
    fields = dict(f.split("=", 1) for f in route.split()[1:])
    assert route.startswith("pd ") and fields["prefill"] != "-", route
    engines = stack.engines()
    prefill = stack.container_on(engines[fields["prefill"]]["address"])
    decode = stack.container_on(engines[fields["decode"]]["address"])
    assert (prefill, decode) == ("switchyard-engine-prefill", "switchyard-engine-decode"), route
    text = body["choices"][0]["message"]["content"]
    step(f"pd ok: route '{route}' = {prefill} -> {decode}; "
         f"{body['usage']['completion_tokens']} tokens: {text!r}")


def switch_policy(stack: Stack, policy: str) -> None:
    # Every replica is told (idempotent where admin changes already reach all replicas).
    for base in stack.replicas.values():
        status, _, body = http("PUT", f"{base}/admin/policy", {"policy": policy})
        assert status == 200 and body["policy"] == policy, body


def check_policy_switch(stack: Stack) -> None:
    switch_policy(stack, "long_prompts_pd")
    for _ in REPLICAS:  # through HAProxy: one request to each replica
        status, headers, _ = chat(stack.base, "Hi")
        route = headers["x-switchyard-route"]
        assert status == 200 and route.startswith("dp ") and "via=long_prompts_pd" in route, route
        decode = stack.container_on(stack.engines()[route.split()[1].split("=")[1]]["address"])
        assert decode == "switchyard-engine-decode", route
    switch_policy(stack, "pd")
    step(f"policy switch ok: long_prompts_pd answered with '{route}' on {decode}; back to pd")


def answered_by(stack: Stack, requests: int) -> list[str]:
    """The replicas (HAProxy's X-Switchyard-Replica) that answered `requests` chats under pd."""
    names = []
    for i in range(requests):
        status, headers, body = chat(stack.base, f"Count to {i + 2}.", max_tokens=4)
        assert status == 200 and headers["x-switchyard-route"].startswith("pd "), (status, body)
        names.append(headers["x-switchyard-replica"])
    return names


def check_two_routers(stack: Stack) -> None:
    """HAProxy takes turns over both replicas; each serves pd directly too; a killed replica
    costs no request (HAProxy retries a refused connection on the other, then its checks take
    the replica out); restarted, it is back in the rotation."""
    # A replica ready on its own port may still be out of HAProxy's rotation: one that was not
    # ready at HAProxy's first checks needs two good ones (`rise 2`, 2 s apart) to come back.
    wait_for("HAProxy to have both replicas in its rotation",
             lambda: set(answered_by(stack, 2)) == set(REPLICAS), timeout_s=60, every_s=1)
    names = answered_by(stack, 4)
    assert sorted(set(names)) == sorted(REPLICAS), names
    for name, base in stack.replicas.items():
        status, headers, _ = chat(base, "Hello.", max_tokens=4)
        assert status == 200 and headers["x-switchyard-route"].startswith("pd "), (name, status)
    step(f"two routers ok: HAProxy answered from {names}; each replica serves pd directly")
    run("docker", "kill", "switchyard-router-1")
    during = answered_by(stack, 4)
    assert set(during) == {"router-0"}, during
    step(f"router-1 killed: every request still answered, by {sorted(set(during))}")
    run("docker", "start", "switchyard-router-1")
    wait_for("HAProxy to send work to router-1 again",
             lambda: "router-1" in answered_by(stack, 2), timeout_s=300, every_s=2)
    step("router-1 restarted: back in HAProxy's rotation")


def check_prometheus(stack: Stack) -> None:
    if shutil.which("prometheus") is None:
        apt_install("prometheus")
    port = free_port()
    config = os.path.join(tempfile.mkdtemp(prefix="switchyard-prom-"), "prometheus.yml")
    with open(os.path.join(DEPLOY, "observability", "prometheus.yml"), encoding="utf-8") as f:
        text = f.read()
        for default, name in (("8001", "SWITCHYARD_ROUTER_0_PORT"),
                              ("8002", "SWITCHYARD_ROUTER_1_PORT"),
                              ("50071", "SWITCHYARD_PREFILL_METRICS_PORT"),
                              ("50072", "SWITCHYARD_DECODE_METRICS_PORT")):
            text = text.replace(f"127.0.0.1:{default}", f"127.0.0.1:{stack.ports[name]}")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text)
    log = open(os.path.join(os.path.dirname(config), "prometheus.log"), "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={os.path.dirname(config)}/data",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        # The router and both engines are up for Prometheus, and their switchyard: metrics
        # (the requests sent so far) arrived: count the series per job.
        def scraped(job: str, up: int) -> int:
            query = (f"http://127.0.0.1:{port}/api/v1/query?query=" + urllib.parse.quote(
                f'count({{__name__=~"switchyard:.+", job="{job}"}}) '
                f'and on() sum(up{{job="{job}"}}) == {up}'))
            status, _, body = http("GET", query, timeout_s=5)
            result = body["data"]["result"] if status == 200 else []
            return int(float(result[0]["value"][1])) if result else 0

        router = wait_for("Prometheus to scrape both routers",
                          lambda: scraped("switchyard-router", 2), timeout_s=60)
        engines = wait_for("Prometheus to scrape both engines",
                           lambda: scraped("switchyard-engines", 2), timeout_s=60)
        step(f"prometheus ok (Debian's package): 2 routers and 2 engines up, {router} + {engines} "
             "switchyard: series scraped")
    except BaseException:
        log.flush()
        with open(log.name, encoding="utf-8", errors="replace") as f:
            print(f.read()[-3000:], flush=True)
        raise
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        log.close()
        shutil.rmtree(os.path.dirname(config), ignore_errors=True)


def check_decode_failure(stack: Stack) -> None:
    """The decode engine dies: pd runs degraded on the prefill engine (docs/reliability.md) and
    /ready?strict=1 says the decode role is missing; with the prefill engine dead too, requests
    get an OpenAI error body; both come back and pd serves again."""
    engines = stack.engines()
    ids = {e["role"]: i for i, e in engines.items()}
    run("docker", "kill", "switchyard-engine-decode")
    wait_for("every router to see the decode engine down", lambda: stack.all_replicas(
        lambda base: not stack.engines(base)[ids["decode"]]["healthy"]), timeout_s=60)
    status, headers, body = chat(stack.base, "Are you there?")
    route = headers.get("x-switchyard-route", "")
    assert status == 200 and f"degraded=decode->{ids['prefill']}" in route, (status, route, body)
    for base in stack.replicas.values():
        status, _, ready = http("GET", f"{base}/ready?strict=1", timeout_s=5)
        assert status == 503 and "decode" in json.dumps(ready), (base, status, ready)
    step(f"decode down ok: served degraded ('{route}'), /ready?strict=1 503 {json.dumps(ready)}")
    run("docker", "kill", "switchyard-engine-prefill")
    wait_for("every router to see the prefill engine down", lambda: stack.all_replicas(
        lambda base: not stack.engines(base)[ids["prefill"]]["healthy"]), timeout_s=60)
    status, _, body = chat(stack.base, "Are you there?")
    error = body.get("error") if isinstance(body, dict) else None
    assert status >= 500 and error and set(error) == {"message", "type", "param", "code"}, body
    step(f"both engines down ok: HTTP {status} {json.dumps(body)}")
    run("docker", "start", "switchyard-engine-prefill", "switchyard-engine-decode")
    wait_for("both engines to come back", stack.ready, timeout_s=600, every_s=2)
    status, headers, _ = chat(stack.base, "Welcome back.")
    assert status == 200 and headers["x-switchyard-route"].startswith("pd "), headers
    step(f"recovered ok: '{headers['x-switchyard-route']}'")


def main() -> int:
    if os.geteuid() != 0:
        raise SystemExit("make deploy-test installs and starts Docker: run it as root")
    with docker_daemon():
        compose = compose_command()
        step("building images (make deploy-images)")
        run("make", "-C", ROOT, "deploy-images")
        ports = {name: free_port() for name in (
            "SWITCHYARD_ROUTER_PORT", "SWITCHYARD_ROUTER_0_PORT", "SWITCHYARD_ROUTER_1_PORT",
            "SWITCHYARD_PREFILL_PORT", "SWITCHYARD_DECODE_PORT",
            "SWITCHYARD_PREFILL_KV_PORT", "SWITCHYARD_DECODE_KV_PORT",
            "SWITCHYARD_PREFILL_METRICS_PORT", "SWITCHYARD_DECODE_METRICS_PORT")}
        stack = Stack(compose, ports)
        stack("down", "--volumes", "--remove-orphans", check=False)  # leftovers of a killed run
        try:
            stack("up", "-d")
            wait_for("HAProxy and both routers with 2 healthy engines", stack.ready,
                     timeout_s=900, every_s=2)
            step(f"stack up: HAProxy {stack.base} over {stack.replicas}, engines "
                 f"{stack.engines()}")
            check_pd(stack)
            check_two_routers(stack)
            check_policy_switch(stack)
            if os.environ.get("DEPLOY_TEST_PROMETHEUS", "1") != "0":
                check_prometheus(stack)
            check_decode_failure(stack)
        except BaseException:
            stack("logs", "--tail", "60", check=False)
            raise
        finally:
            stack("down", "--volumes", "--remove-orphans", check=False)
    step(f"deploy-test passed in {time.monotonic() - _T0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
