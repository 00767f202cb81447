"""What gRPC alone costs against the raw SQLite loop: the ceiling of `leaseq bench ... --baseline`.

    python -m leaseq.bench.grpc_floor [--batch 100] [--producers 2] [--duration 10]

Runs, one after the other on this machine:

1. a do-nothing grpc.aio server (the server options of `leaseq serve`; every method answers
   empty bytes at once), driven by `leaseq bench send --target` with the same clients, batch and
   producers as the send row of docs/performance.md: its CPU per message is what gRPC and asyncio cost before
   any queue work;
2. the raw SQLite loop of `--baseline` (send: insert + COMMIT), its CPU per message;
3. `leaseq bench send --baseline` itself, for the real server beside them.

The server's calls and the store's work share one core (one process, one GIL; the other core
runs the clients). So a server whose own layer cost nothing, doing the raw loop's work per
message (its CPU and its wait for fsync, `raw wall`) and gRPC's (`gRPC`, CPU), could reach at
most raw wall / (raw wall + gRPC) of the raw loop's rate when it waits for each fsync on the
event loop (as the SQLite writer does for light groups), and raw wall / max(raw wall, raw CPU +
gRPC) if the fsync waits overlapped gRPC's work perfectly: the two "ceiling" lines.

    python -m leaseq.bench.grpc_floor --per-rpc [--store sqlite|memory|postgres] [--batch 100]
                                 [--calls 1000] [--dsn URL]

splits one call of each hot RPC instead: one client makes --calls calls of SendMessages (batch
messages each), GetMessages (batch, no wait), DeleteMessages (the receipts of one receive) and
GetQueueStats, one after the other, first to `leaseq serve` over a fresh store, then the same
requests to the do-nothing server (GetMessages there a server stream of one empty message, as
leaseq answers it). For each it prints the server's CPU per call on both and the difference:
what the store and leaseq's service layer add to gRPC's own cost of the call.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import grpc
from google.protobuf.duration_pb2 import Duration

from leaseq.bench.baseline import run_baseline
from leaseq.bench.cpu import process_cpu_seconds
from leaseq.bench.launcher import free_port, running_server, store_for
from leaseq.bench.settings import DEFAULT_DSN
from leaseq.server.app import SERVER_OPTIONS
from leaseq.v1 import queue_service_pb2 as pb
from leaseq.v1 import queue_service_pb2_grpc as pb_grpc

STREAMING = ("GetMessages",)
"""leaseq's server-streaming RPCs among those measured: the do-nothing server answers them with
one message on a stream, as leaseq answers a GetMessages that is not a follow."""


class _AnswerEmpty(grpc.GenericRpcHandler):
    """Every method: empty bytes (a valid empty message of any type), once; on a stream for
    STREAMING methods, else unary."""

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        if handler_call_details.method.rsplit("/", 1)[-1] in STREAMING:

            async def stream(request: bytes, context: grpc.aio.ServicerContext):
                yield b""

            return grpc.unary_stream_rpc_method_handler(stream)

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
        sys.executable,
        "-m",
        "leaseq.cli",
        "bench",
        "send",
        "--batch",
        str(args.batch),
        "--producers",
        str(args.producers),
        "--duration",
        str(args.duration),
        "--json",
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"leaseq bench failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


class _DoNothingServer:
    """The do-nothing server in a child process (a fresh interpreter, as `leaseq serve` is)."""

    def __enter__(self) -> _DoNothingServer:
        self.address = f"127.0.0.1:{free_port()}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "leaseq.bench.grpc_floor", "--serve", self.address],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "serving":
            self.__exit__()
            raise SystemExit("the do-nothing server did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        self.process.wait()


def _print_when() -> None:
    """The first line of either report: when it ran, and how busy the machine was."""
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), f"load {os.getloadavg()[0]:.2f}")


def _cpu_per_call(pid: int, calls: Sequence[Callable[[], object]]) -> float:
    """The server's CPU (µs) per call of `calls`, each a function making one call, in turn."""
    before = process_cpu_seconds(pid)
    for call in calls:
        call()
    after = process_cpu_seconds(pid)
    if before is None or after is None:
        raise SystemExit("the server's CPU time cannot be read (/proc)")
    return 1e6 * (after - before) / len(calls)


def _per_rpc(args: argparse.Namespace) -> None:
    batch, n, queue = args.batch, args.calls, "grpc-floor"
    send = pb.SendMessagesRequest(queue=queue, entries=[pb.SendEntry(body=b"x" * 100)] * batch)
    receive = pb.GetMessagesRequest(queue=queue, max_messages=batch, wait_time=Duration())
    stats = pb.GetQueueStatsRequest(name=queue)
    deletes: list[pb.DeleteMessagesRequest] = []  # leaseq's receipts, sent to both servers

    def receive_for_deletes(stub: pb_grpc.QueueServiceStub) -> None:
        receipts = [m.receipt for reply in stub.GetMessages(receive) for m in reply.messages]
        deletes.append(pb.DeleteMessagesRequest(queue=queue, receipts=receipts))

    def measure(pid: int, target: str, keep_receipts: bool) -> dict[str, float]:
        with grpc.insecure_channel(target, options=SERVER_OPTIONS) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            sending = [lambda: stub.SendMessages(send)] * n
            receiving: list[Callable[[], object]]
            if keep_receipts:  # leaseq's receipts, for the deletes on both servers
                receiving = [lambda: receive_for_deletes(stub)] * n
            else:
                receiving = [lambda: list(stub.GetMessages(receive))] * n
            return {
                "SendMessages": _cpu_per_call(pid, sending),
                "GetMessages": _cpu_per_call(pid, receiving),
                "DeleteMessages": _cpu_per_call(
                    pid, [functools.partial(stub.DeleteMessages, d) for d in deletes]
                ),
                "GetQueueStats": _cpu_per_call(pid, [lambda: stub.GetQueueStats(stats)] * n),
            }

    with store_for(args.store, args.dsn, prefix="grpc_floor") as url, running_server(url) as real:
        assert real.pid is not None
        with grpc.insecure_channel(real.target) as channel:
            pb_grpc.QueueServiceStub(channel).CreateQueue(
                pb.CreateQueueRequest(name=queue, config=pb.QueueConfig(max_in_flight=10**7))
            )
        leaseq = measure(real.pid, real.target, keep_receipts=True)
    if any(len(d.receipts) != batch for d in deletes):
        raise SystemExit("a GetMessages came back short: the deletes measured would not be alike")
    with _DoNothingServer() as noop:
        nothing = measure(noop.process.pid, noop.address, keep_receipts=False)

    _print_when()
    print(
        f"one client, {n} calls of each, batch {batch}, leaseq over {args.store}:"
        " the server's CPU per call, µs"
    )
    print(f"{'RPC':<16}{'leaseq':>10}{'do-nothing':>12}{'leaseq adds':>13}{'per message':>13}")
    for method, cost in leaseq.items():
        extra = cost - nothing[method]
        per_message = f"{extra / batch:13.2f}" if method != "GetQueueStats" else f"{'-':>13}"
        print(f"{method:<16}{cost:10.0f}{nothing[method]:12.0f}{extra:13.0f}{per_message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--per-rpc", action="store_true", help="split one call of each hot RPC")
    parser.add_argument("--store", choices=("sqlite", "memory", "postgres"), default="sqlite")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("LEASEQ_BENCH_DSN", DEFAULT_DSN),
        help="--store postgres: the database that gets a fresh schema (as leaseq bench's --dsn)",
    )
    parser.add_argument("--calls", type=int, default=1000, help="--per-rpc: calls of each RPC")
    args = parser.parse_args()
    if not 1 <= args.batch <= 10_000:
        parser.error("--batch takes 1 to 10,000")
    if args.calls < 1:
        parser.error("--calls takes 1 or more")
    if args.per_rpc:
        _per_rpc(args)
        return

    with _DoNothingServer() as server:
        noop = _bench(args, "--target", server.address, "--server-pid", str(server.process.pid))
    raw = run_baseline("send", args.batch, args.duration)
    real = _bench(args, "--baseline")

    grpc_us, raw_us = noop["server_cpu_us_per_msg"], raw["cpu_us_per_msg"]
    raw_wall_us = 1e6 / raw["msgs_per_s"]
    _print_when()
    print(f"send, batch {args.batch}, {args.producers} producers, {args.duration:g} s each")
    print(
        f"do-nothing grpc.aio server: {noop['msgs_per_s']:,.0f} msgs/s, "
        f"{grpc_us} us server CPU per message ({noop['server_cpu_percent']}% of a core)"
    )
    print(
        f"raw SQLite loop:            {raw['msgs_per_s']:,.0f} msgs/s, {raw_us} us CPU per message"
        f" ({raw_wall_us:.2f} us wall)"
    )
    print(
        f"ceiling, fsync waited for on the loop: {raw_wall_us / (raw_wall_us + grpc_us):.2f}x; "
        f"fsync overlapped: {raw_wall_us / max(raw_wall_us, raw_us + grpc_us):.2f}x"
    )
    print(
        f"leaseq serve (SQLite):      {real['msgs_per_s']:,.0f} msgs/s, "
        f"{real['server_cpu_us_per_msg']} us per message; raw loop beside it "
        f"{real['baseline_msgs_per_s']:,.0f}: {real['baseline_ratio']:.2f}x"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_serve(sys.argv[2]))
    else:
        main()
