"""An OTLP profiles receiver for the tests, on the official generated code.

Usage: otlp_receiver.py PORT OUT.jsonl [--hang]
Serves ProfilesService/Export on 127.0.0.1:PORT with grpcio and appends each
request, decoded by opentelemetry-proto's generated classes and turned into
JSON by protobuf's json_format, as one line of OUT.jsonl. With --hang it
accepts connections and never answers (a hung backend).
"""
import json
import socket
import sys
import time
from concurrent import futures

port, out = int(sys.argv[1]), sys.argv[2]

if "--hang" in sys.argv:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    held = []
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        held.append(c)  # never read, never answer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc as svc_grpc


class Receiver(svc_grpc.ProfilesServiceServicer):
    def Export(self, request, context):
        with open(out, "a") as f:
            f.write(json.dumps(json_format.MessageToDict(request)) + "\n")
        return svc.ExportProfilesServiceResponse()


server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), compression=grpc.Compression.Gzip)
svc_grpc.add_ProfilesServiceServicer_to_server(Receiver(), server)
server.add_insecure_port(f"127.0.0.1:{port}")
server.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
