# Serves ClickHouse (the engine in PyPI's chdb-core) on loopback for sluice's
# tests: clickhouse-local started by one stateless query, which opens the TCP
# and HTTP listeners named in ./config.xml and then runs a query that never
# ends; the server lives as long as that query. Written by internal/testinfra.
#
# usage: python chdb_serve.py DATA_DIR HTTP_PORT
#
# The chdb package's __init__ is not run: it opens and closes a connection,
# which shuts down ClickHouse's streaming-storage registry (CREATE TABLE ...
# ENGINE = Kafka then fails with "Shutdown was called"). Only the extension
# module is loaded, with a stub parent package.
#
# SIGTERM stops the server cleanly: the serving query is killed over HTTP and
# the process exits when the query returns.
import ctypes
import importlib.machinery
import importlib.util
import os
import signal
import sys
import threading
import types
import urllib.request

SERVING_QUERY = ("SELECT max(sleepEachRow(0.2)) FROM system.numbers "
                 "SETTINGS max_block_size = 1")


def load_chdb():
    spec = importlib.machinery.PathFinder.find_spec("chdb")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("chdb_serve: the chdb package (chdb-core) is not installed in " + sys.prefix)
    pkg_dir = list(spec.submodule_search_locations)[0]
    so = os.path.join(pkg_dir, "_chdb.abi3.so")
    stub = types.ModuleType("chdb")
    stub.__path__ = [pkg_dir]
    sys.modules["chdb"] = stub
    # As the package does: resolve the pybind11 stub's operator new/delete
    # from the extension's own allocator.
    ctypes.CDLL(so, mode=sys.getdlopenflags() | os.RTLD_DEEPBIND)
    ext = importlib.util.spec_from_file_location("chdb._chdb", so)
    mod = importlib.util.module_from_spec(ext)
    ext.loader.exec_module(mod)
    sys.modules["chdb._chdb"] = mod
    return mod


def main():
    data_dir, http_port = sys.argv[1], int(sys.argv[2])
    chdb = load_chdb()
    outcome = {}

    def serve():
        # A failed statement (a broken config, a port in use) ends the call
        # with an error in the result, as the kill on stop does.
        try:
            res = chdb.query("SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; " + SERVING_QUERY,
                             "TSV", path=data_dir)
            if res.has_error():
                outcome["error"] = res.error_message().split(" Stack trace")[0]
        except Exception as e:
            outcome["error"] = e

    stopping = threading.Event()

    def stop(signum, frame):
        stopping.set()
        req = urllib.request.Request(
            "http://127.0.0.1:%d/" % http_port,
            data=b"KILL QUERY WHERE startsWith(query, 'SELECT max(sleepEachRow(0.2))') SYNC")
        try:
            urllib.request.urlopen(req, timeout=10).read()
        except Exception as e:
            print("chdb_serve: stop:", e, file=sys.stderr, flush=True)
            os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.2)
    if not stopping.is_set():
        print("chdb_serve: the serving query ended:", outcome.get("error", "no error"),
              file=sys.stderr, flush=True)
        sys.exit(1)


main()
