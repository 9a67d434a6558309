"""Generated gRPC code; see scripts/gen_protos.py."""
