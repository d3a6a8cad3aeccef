"""Generated protobuf modules; regenerate with `make protos`, never edit."""
