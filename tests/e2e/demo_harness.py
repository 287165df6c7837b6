"""What the end-to-end test runs and talks to: a synthetic dcgm-exporter, an OTLP/HTTP receiver,
the demo process, and clients of Prometheus's HTTP API and of kubectl, plus the log line."""
import gzip
import http.server
import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, flush=True)


class FakeDcgmExporter:
    """Serves DCGM_FI_DEV_GPU_UTIL for the demo's GPUs as dcgm-exporter labels it (gpu, UUID,
    pci_bus_id, device, modelName, Hostname), with a utilisation derived from the UUID, so the
    join's values can be checked. The GPUs are learnt from the demo's Prometheus
    (dralens_device_info) once it answers; until then the body is empty."""

    def __init__(self):
        self.prometheus = None
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.render().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def utilisation(uuid):
        return sum(uuid.encode()) % 97 + 1

    def render(self):
        lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                 "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        if self.prometheus is not None:
            try:
                gpus = self.prometheus.query('dralens_device_info{type="gpu"}')
            except Exception:  # Prometheus not ready yet: nothing to serve
                gpus = []
            for i, r in enumerate(sorted(gpus, key=lambda r: r["metric"]["uuid"])):
                m = r["metric"]
                node = m["instance"]
                lines.append(
                    f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="{m["uuid"]}",'
                    f'pci_bus_id="{m.get("pci_bus_id", "")}",device="nvidia{i}",'
                    f'modelName="{m.get("product", "")}",Hostname="{node}"}} '
                    f'{self.utilisation(m["uuid"])}')
        return "\n".join(lines) + "\n"


class OtlpReceiver:
    """OTLP/HTTP JSON on loopback: records the trace ids of every span it is sent."""

    def __init__(self):
        self.trace_ids = set()
        self.spans = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding", "") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                try:
                    doc = json.loads(body)
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                receiver.record(doc)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, doc):
        with self.lock:
            for rs in doc.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for span in ss.get("spans", []):
                        self.spans += 1
                        self.trace_ids.add(span["traceId"].lower())

    def snapshot(self):
        with self.lock:
            return set(self.trace_ids), self.spans


class Demo:
    """The dralens demo process; its output is collected on a thread."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line)

    def output(self):
        with self.lock:
            return "".join(self.lines)

    def find(self, pattern):
        m = re.search(pattern, self.output(), re.M)
        return m.group(1) if m else None


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


class Prometheus:
    def __init__(self, url):
        self.url = url

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        doc = get_json(f"{self.url}/api/v1/{path}?{query}")
        if doc.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {doc}")
        return doc["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]


def kubectl(kubectl_path, server, home, *args):
    env = {"HOME": home, "PATH": "/usr/bin:/bin", "KUBECONFIG": os.path.join(home, "none")}
    return subprocess.run([kubectl_path, "--server", server, "--request-timeout=20s", *args],
                          env=env, capture_output=True, text=True, timeout=60)

