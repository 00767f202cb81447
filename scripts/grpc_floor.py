"""What gRPC alone costs against the raw SQLite loop: the ceiling of `leaseq bench ... --baseline`.

    python scripts/grpc_floor.py [--batch 100] [--producers 2] [--duration 10]

Runs, one after the other on this machine:

1. a do-nothing grpc.aio server (the server options of `leaseq serve`; every method answers
   empty bytes at once), driven by `leaseq bench send --target` with the same clients, batch and
   producers as issue 20's send row: its CPU per message is what gRPC and asyncio cost before
   any queue work;
2. the raw SQLite loop of `--baseline` (send: insert + COMMIT), its CPU per message;
3. `leaseq bench send --baseline` itself, for the real server beside them.

The server's calls and the store's work share one core (one process, one GIL; the other core
runs the clients). So a server whose own layer cost nothing, doing the raw loop's work per
message (its CPU and its wait for fsync, `raw wall`) and gRPC's (`gRPC`, CPU), could reach at
most raw wall / (raw wall + gRPC) of the raw loop's rate when it waits for each fsync on the
event loop (as the SQLite writer does for light groups), and raw wall / max(raw wall, raw CPU +
gRPC) if the fsync waits overlapped gRPC's work perfectly: the two "ceiling" lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import grpc

from leaseq.bench.baseline import run_baseline
from leaseq.bench.launcher import free_port
from leaseq.server.app import SERVER_OPTIONS


class _AnswerEmpty(grpc.GenericRpcHandler):
    """Every method, unary: empty bytes (a valid empty message of any type)."""

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return b""

        return grpc.unary_unary_rpc_method_handler(answer)


async def _serve(address: str) -> None:
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((_AnswerEmpty(),))
    server.add_insecure_port(address)
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


def _bench(args: argparse.Namespace, *extra: str) -> dict:
    command = [
        sys.executable, "-m", "leaseq.cli", "bench", "send", "--batch", str(args.batch),
        "--producers", str(args.producers), "--duration", str(args.duration), "--json", *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"leaseq bench failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()

    address = f"127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", address], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        noop = _bench(args, "--target", address, "--server-pid", str(server.pid))
    finally:
        server.terminate()
        server.wait()
    raw = run_baseline("send", args.batch, args.duration)
    real = _bench(args, "--baseline")

    grpc_us, raw_us = noop["server_cpu_us_per_msg"], raw["cpu_us_per_msg"]
    raw_wall_us = 1e6 / raw["msgs_per_s"]
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), f"load {os.getloadavg()[0]:.2f}")
    print(f"send, batch {args.batch}, {args.producers} producers, {args.duration:g} s each")
    print(f"do-nothing grpc.aio server: {noop['msgs_per_s']:,.0f} msgs/s, "
          f"{grpc_us} us server CPU per message ({noop['server_cpu_percent']}% of a core)")
    print(f"raw SQLite loop:            {raw['msgs_per_s']:,.0f} msgs/s, {raw_us} us CPU per message"
          f" ({raw_wall_us:.2f} us wall)")
    print(f"ceiling, fsync waited for on the loop: {raw_wall_us / (raw_wall_us + grpc_us):.2f}x; "
          f"fsync overlapped: {raw_wall_us / max(raw_wall_us, raw_us + grpc_us):.2f}x")
    print(f"leaseq serve (SQLite):      {real['msgs_per_s']:,.0f} msgs/s, "
          f"{real['server_cpu_us_per_msg']} us per message; raw loop beside it "
          f"{real['baseline_msgs_per_s']:,.0f}: {real['baseline_ratio']:.2f}x")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_serve(sys.argv[2]))
    else:
        main()
