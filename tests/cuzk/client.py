#!/usr/bin/env python3
"""A cuzk.v1 client in Python, as a second implementation of the protocol:
its stubs are generated from provd's own .proto (worker/proto) with
grpcio-tools at start, and it drives a provd over TCP or a unix socket.

Usage: client.py PLAN.json  (prints RESULTS as JSON on stdout)

PLAN is a list of calls, run in order:
  {"call": "Prove", "target": "127.0.0.1:9820" | "unix:///path.sock",
   "token": "..." (optional), "request": {...}}
`request` is the message in protobuf's JSON mapping (bytes as base64), but
for one addition, which this client turns into bytes as Curio's Go client
does (lib/ffi/cuzk_funcs.go, wrapC1Output):
  "vanilla_proof": {"curio_c1": {"c1_json_file": PATH, "sector": N, "sector_size": S}}
becomes the JSON envelope {"SectorNum", "Phase1Out": base64 of the C1
output's JSON bytes (Go's encoding of []byte), "SectorSize"}.

Each result is {"ok": <response in the JSON mapping, field names as in the
.proto>} or {"error": {"code": "INVALID_ARGUMENT", "message": "..."}}.

A step {"parallel": [CALL, ...]} makes its calls at once, each on its own
thread, as Curio's tasks do; its result is {"parallel": [RESULT, ...]}.
"""

import base64
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf import json_format
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, "..", "..", "worker", "proto")
MAX_MESSAGE = 256 << 20  # as Curio's client allows


def generated():
    """The stubs, compiled from provd's .proto into a temporary directory."""
    out = tempfile.mkdtemp(prefix="cuzk-py-")
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    status = protoc.main([
        "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}",
        f"--python_out={out}", f"--grpc_python_out={out}",
        os.path.join(PROTO_ROOT, "cuzk", "v1", "proving.proto"),
    ])
    if status != 0:
        sys.exit(f"protoc failed on {PROTO_ROOT}/cuzk/v1/proving.proto")
    sys.path.insert(0, out)
    from cuzk.v1 import proving_pb2, proving_pb2_grpc  # noqa: E402
    return proving_pb2, proving_pb2_grpc


def curio_c1_envelope(spec):
    """Curio's c1OutputWrapper, marshalled as Go's encoding/json does."""
    with open(spec["c1_json_file"], "rb") as f:
        c1 = f.read()
    wrapper = {
        "SectorNum": spec["sector"],
        "Phase1Out": base64.b64encode(c1).decode(),
        "SectorSize": spec["sector_size"],
    }
    return json.dumps(wrapper, separators=(",", ":")).encode()


def prepared(request):
    """The request with Curio's envelope made (bytes go in as base64)."""
    def walk(value):
        if isinstance(value, dict):
            if "curio_c1" in value:
                return base64.b64encode(curio_c1_envelope(value["curio_c1"])).decode()
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value
    return walk(request)


REQUESTS = {
    "SubmitProof": "SubmitProofRequest",
    "AwaitProof": "AwaitProofRequest",
    "Prove": "ProveRequest",
    "CancelProof": "CancelProofRequest",
    "GetStatus": "GetStatusRequest",
    "GetMetrics": "GetMetricsRequest",
    "PreloadSRS": "PreloadSrsRequest",
    "EvictSRS": "EvictSrsRequest",
}


def main():
    pb, pb_grpc = generated()
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    options = [("grpc.max_send_message_length", MAX_MESSAGE),
               ("grpc.max_receive_message_length", MAX_MESSAGE)]
    channels = {}

    def channel(target):
        # One channel per target, made before any thread uses it.
        if target not in channels:
            unix = [("grpc.default_authority", "localhost")] if target.startswith("unix:") else []
            channels[target] = grpc.insecure_channel(target, options=options + unix)
        return channels[target]

    def run(step):
        stub = pb_grpc.ProvingEngineStub(channel(step["target"]))
        message = json_format.ParseDict(prepared(step.get("request", {})), getattr(pb, REQUESTS[step["call"]])())
        metadata = [("authorization", f"Bearer {step['token']}")] if "token" in step else None
        try:
            response = getattr(stub, step["call"])(message, metadata=metadata, timeout=step.get("deadline_s", 1800))
            return {"ok": json_format.MessageToDict(
                response, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)}
        except grpc.RpcError as e:
            return {"error": {"code": e.code().name, "message": e.details()}}

    results = []
    for step in plan:
        if "parallel" in step:
            for call in step["parallel"]:
                channel(call["target"])
            with ThreadPoolExecutor(max_workers=len(step["parallel"]) or 1) as pool:
                results.append({"parallel": list(pool.map(run, step["parallel"]))})
        else:
            results.append(run(step))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
