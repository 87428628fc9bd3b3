"""Generated protobuf modules (package ``oneflow``); sources are in protos/."""
