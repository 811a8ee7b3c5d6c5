"""The committed protobuf code is exactly what `make proto` generates from proto/."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "libs/protocol/src/magnetar_protocol"


def test_generated_code_is_current(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"),
         f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", "magnetar.proto", "pulsar_api.proto"],
        check=True, cwd=ROOT,
    )
    for name in ("magnetar_pb2.py", "magnetar_pb2.pyi", "pulsar_api_pb2.py", "pulsar_api_pb2.pyi"):
        assert (tmp_path / name).read_text() == (GENERATED / name).read_text(), (
            f"{name} is stale: run `make proto` and commit the result"
        )
